"""Durable races and their recovery: storage by key with compare-and-swap (the `transport`
interface, kept in a directory by `local_transport`), the saved run envelope and its owner
(`checkpoint`), the rules a saved state must satisfy (`checkpoint_state`), whether a coordinator is
alive (`ownership`), `DurableRun` checkpointing a race at every transition and resuming or replaying
it (`run`), and the four recovery steps as one API (`recovery`).
"""
