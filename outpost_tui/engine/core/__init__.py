"""The race's vocabulary, shared by every layer of the engine: the immutable specification (`spec`,
its fields declared through `declaration`, with the value `rules`), the candidate and race statuses
and attempt phases (`statuses`), token usage and cost (`usage`), the event kinds and the bus they
travel on (`events`), the result records (`result`) and the live `RaceModel` built from the events
(`model`). Nothing here imports the rest of the engine (only the foundation modules beside it,
`gitenv` and `files`), so git, sandboxes, agents and the verdict can speak these terms without
depending on the coordinator.
"""
