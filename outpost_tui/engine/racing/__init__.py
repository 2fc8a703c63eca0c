"""Running one race: `Race` in `coordinator` admits candidates under the concurrency limit and the
budget (`budget`), runs each `Attempt` (`attempt`: branch, worktree, sandbox, phase, record) through
its setup (`setup`), agent and verdict, picks the winner, cancels the rest and settles the result.
It may use every lower package; only `durable` and the public API (`api`, the engine's
`__init__`) import it.
"""
