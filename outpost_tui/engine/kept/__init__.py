"""Kept work, after the race: what races kept, each attempt's worktree or archive with its outcome
(`retained`), its work compared with the baseline or another attempt's (`comparison`), archiving a
worktree under a verified ref (`archive`), removing it only once that archive holds it (`removal`)
and recreating it from the archive (`restore`), loss-proof pruning of kept worktrees and branches
(`cleanup`), which processes use a directory (`processes`), and running a race's validation again
on a kept attempt (`revalidation`).
"""
