"""The issue's performance targets, measured against raw work in the same run (see bench_engine.py)."""

import os

import pytest

from tests.benchmarks import bench_engine

pytestmark = [pytest.mark.benchmark, pytest.mark.alone]


def _loaded() -> float | None:
    """The load average when it is above the cores: then other processes decide wall times, and
    only what they cannot inflate (CPU time, counts) is asserted."""
    load = os.getloadavg()[0]
    return load if load > (os.cpu_count() or 1) else None


def test_race_overhead_against_raw_git_and_process_work():
    figures = bench_engine.overhead(rounds=5)
    print(figures)
    # 1.6-1.7x before the speed work (the sealed verdict, the repository record and per-attempt
    # cgroups had landed); since, the engine's allocations run at once, the baseline's verdict is
    # not held up by its cleanup and an attempt runs 8 git processes instead of 17. Target 1.3x,
    # not reached yet: 1.44-1.52x measured on a quiet 2-core machine against raw work whose worktree
    # commands also run at once (CPU 1.25-1.43x: the agent's own Python start-up is most of each
    # attempt), so a regression bound above that noise is asserted until the target is (wall time
    # where the machine is not loaded beyond its cores: under a load average of 3-5 this test failed
    # once in ten runs, while five runs printed in the same window had a CPU ratio of 1.24-1.38x).
    assert figures["cpu_ratio"] <= 1.8, figures
    if _loaded() is None:
        assert figures["ratio"] <= 2.5, figures


def test_race_overhead_with_the_cheapest_agent():
    # An `sh` agent that commits one file, validated and scored: nothing hides the engine's fixed
    # cost per attempt. Target 1.3x (first bar 1.5x), not reached yet. Since the raw work's worktree
    # commands run all at once (as the engine's do; they took turns behind a lock before), its
    # wall time fell by a fifth to a half and the wall ratio rose with it: 1.6-2.3x measured on a
    # quiet 2-core machine and in a fresh CI run (engine 0.37 s against 0.16 s there), where the
    # CPU ratio, which the raw work's turns never changed, is 1.5-1.75x (28-34 ms of CPU per
    # attempt, two thirds of it this process's own: the event loop, its threads, spawning).
    # Since, this process's own CPU per attempt fell from 22-26 ms to 18-19.5 (paths resolved by
    # the kernel, commands watched by the loop without asyncio's transports, the environment read
    # once per race, an attempt's cgroups handed to its grading): side by side on a quiet machine,
    # wall 1.81-2.03x against 1.88-2.30x, CPU 1.51-1.67x against 1.56-1.82x. Bounds above that noise.
    figures = bench_engine.overhead_sh(rounds=5)
    print(figures)
    assert figures["cpu_ratio"] <= 2.2, figures
    # Wall time only where the machine is not loaded beyond its cores: the race is one process
    # whose Python runs on one core at a time, and other processes' load takes more of its share
    # than of the raw work's many short processes (a fresh CI run, load above the cores after the
    # parallel tests: engine 0.69 s against 0.20 s, 3.5x, while its CPU ratio was 1.58x).
    if _loaded() is None:
        assert figures["ratio"] <= 3.0, figures
    # The same raw work with the engine's checks done directly, each once and at its cheapest
    # (raw_work.py: the repository read and guarded, the baseline graded, worktrees checked clean,
    # results pinned, the winner's integration check) costs 3-8 ms of CPU more per attempt; what the
    # engine adds beyond that is its own machinery: CPU 1.26-1.44x measured quiet. Bound above noise.
    assert figures["cpu_ratio_to_checked"] <= 1.9, figures
    # An attempt's own: its worktree and grading checkout added and removed (4, as in the raw work)
    # and the status before its removal (the index read for hidden-edit flags, no ls-files); its
    # commits, trees and pin go through the race's two long-lived sessions (cat-file, update-ref).
    # The repository check (2) is shared by attempts that end together; the race's own (the
    # baseline's checkout, reads at start and end, the two sessions: ~11) spread over 8 attempts.
    # Measured 7.8 in three runs under load 7-13 (was 11.9-12.1 in the same runs before the
    # sessions); ~8.7 when no two attempts end together, a few more with worktree commands retried
    # under load.
    assert figures["git_calls_per_attempt"] <= 9.5, figures


def test_cancel_latency_median_under_100ms():
    figures = bench_engine.cancel_latency(runs=20)
    print(figures)
    assert figures["runs"] == 20
    assert figures["median_ms"] <= 100, figures


def test_log_throughput_and_bounded_memory():
    figures = bench_engine.throughput(rounds=5)
    print(figures)
    # The engine takes 220,000-250,000 lines a second, against a plain read loop of
    # 450,000-610,000 on this 2-core machine: 0.36-0.56x measured (with and without the fence:
    # the same), the loop's own spread being most of it. The median of five rounds' ratios, each
    # round's two runs back to back; a bound below that spread (a line handled twice over, or an
    # event per line, halves it).
    assert figures["engine_vs_plain"] >= 0.3, figures
    # Four times the lines must not mean more memory: logs go to a bounded ring and to disk.
    assert figures["peak_mib_200k"] <= figures["peak_mib_50k"] * 1.25 + 0.5, figures


def test_durable_checkpoint_writes_do_not_grow_with_usage_reports():
    figures = bench_engine.durable(reports=1000)
    print(figures)
    assert figures["checkpoint_writes"] < 60, figures  # 2,000 usage reports, a few dozen writes at most
    # Target 1.2x; asserted with headroom for fsync latency on a loaded CI disk. The ratio is the
    # writes' fixed cost (fsync: 280-560 ms in all under load 9-14) over a plain race that keeps
    # getting cheaper (0.50 s there once the race's git went through its sessions, 0.65-0.89 s
    # before; the durable race's own time unchanged, 0.81-1.07 s): 1.19-1.79 measured then. A
    # load average above the cores times the disk, not the checkpoints: reported, not asserted.
    load = _loaded()
    if figures["ratio"] > 1.5 and load is not None:
        pytest.skip(f"load average {load:.1f}: fsync latency decides the ratio ({figures})")
    assert figures["ratio"] <= 1.5, figures


def test_setup_cache_makes_each_worktrees_venv_cheaper():
    from tests.benchmarks import bench_setup

    figures = bench_setup.setup_cache(candidates=2)
    print(figures)
    assert figures["cold_cache"]["cache"].count("built") == 1, figures
    assert figures["warm_cache"]["cache"] == ["hit", "hit"], figures
    # copying a venv and a pip run that finds everything installed, against building it
    assert figures["warm_vs_no_cache"] < 0.8, figures


def test_cli_starts_at_once_against_a_bare_interpreter():
    from tests.benchmarks import bench_startup

    figures = bench_startup.startup(rounds=11)
    print(figures)
    # Targets over `python -c pass`: --version and --help 0.15 s, check 0.25 s. Measured on an idle
    # 2-core machine: 70-80 ms CPU over Python for --version/--help, 225-235 ms for check (its git
    # calls included; most of it imports: the event and spec dataclasses, the agents' modules).
    # Wall time is asserted too, with the bound stretched by how much the same load slowed
    # `python -c pass` itself in this run. CPU time is nearly load-proof, not quite: above the
    # cores, a fresh-clone run measured check at 273 ms, with `python -c pass` itself at 49 ms of
    # CPU instead of 39 (cold caches, a shared core). Over its target then, it is reported, not
    # asserted.
    stretch = max(1.0, figures["python_ms"] / max(figures["python_cpu_ms"], 1.0))
    load = _loaded()
    for name, target_ms in (("--version", 150), ("--help", 150), ("check", 250)):
        if figures[name]["cpu_over_python_ms"] > target_ms and load is not None:
            pytest.skip(f"load average {load:.1f}: contention inflates CPU time too ({name}: {figures})")
        assert figures[name]["cpu_over_python_ms"] <= target_ms, (name, figures)
        assert figures[name]["over_python_ms"] <= target_ms * stretch, (name, stretch, figures)


def test_app_answers_keys_under_heavy_logs():
    from tests.benchmarks import bench_app

    figures = bench_app.load(candidates=8, rate=5000, seconds=10.0)
    print(figures)
    # Load-independent: every line reaches the model, and memory stays flat (logs go to bounded
    # rings; the early sample is taken once the rings have filled).
    assert figures["every_line"], figures
    assert figures["rss_mib_late"] <= figures["rss_mib_early"] * 1.2 + 10, figures
    # Nearly load-independent: the app's own work. A tick holds the model's lock (which the race's
    # thread waits on for every event) only to copy what changed: p95 0.5-2.1 ms measured under
    # load 10-15 on this 2-core machine, 0.32-0.36 ms under load 3-5 since a tick redraws one
    # panel (15-24 ms when the panels were drawn under it). A tick's CPU (one panel's copy and
    # drawing, the compositor's paint after it not counted): p95 2.8-3.6 ms (a row of three
    # panels per tick: p50 4.2-4.8, p95 5.8-7.4). The app's thread spent 0.19-0.22 s of CPU per
    # second of flood (0.27-0.30 before a panel's log cost what it shows and a key repainted two
    # panels, not the screen); 0.22-0.32 under load 3-7, so its bound only stops a gross
    # regression: the lock's and the tick's bounds are the sharp ones.
    assert figures["lock_held_by_app_ms"]["p95"] <= 3, figures
    assert figures["tick_cpu_ms"]["p95"] <= 10, figures
    assert figures["ui_thread_cpu_per_s"] <= 0.45, figures
    idle, flood = figures["idle"], figures["flood"]
    # Targets under the flood: key to focus change p95 < 50 ms, event-loop lag p95 < 20 ms. Bounds
    # here are half as much again, for a loaded CI machine (measured under load 3.3-4.7, above the
    # cores, where this test skips: lag p95 11-42 ms, key p95 9-55 ms; the loop's longest holds
    # are a panel's paint, CPU p50 5-6 ms, and the collector's full passes, kept short by
    # gc.freeze). They mean something only where the same app,
    # idle, answers within them: when the idle baseline of this run already misses them, the
    # machine is too loaded to tell (other processes get the CPU), and that is reported instead.
    # Since a key costs the idle app about 2 ms, the idle baseline passes on a machine loaded far
    # beyond its cores (load 12 on 2 cores), where eight flooding agents and the app then share
    # what is left: a load average above the core count is reported the same way.
    if idle["key_p95_ms"] > 50 or idle["lag_p95_ms"] > 20 or _loaded() is not None:
        load = os.getloadavg()[0]
        pytest.skip(f"machine too loaded to time the app (load {load:.1f}): idle {idle} (flood {flood})")
    assert flood["keys"] >= 10, figures  # a key every 0.25 s, each answered
    assert flood["key_p95_ms"] <= 75, figures
    assert flood["lag_p95_ms"] <= 30, figures


def test_app_first_frame_against_a_bare_textual_app():
    from tests.benchmarks import bench_app

    figures = bench_app.first_frame(rounds=5)
    print(figures)
    # Target: the first frame within 0.5 s of the process's launch. Against a bare Textual app's
    # first frame in the same run (measured under load 3-7 on this 2-core machine: home 1.07-1.50x
    # its wall time and 1.24-1.57x its CPU; the race screen of 8 candidates 1.71-2.16x and
    # 1.79-2.38x, 445-465 ms where the bare app took 214 ms: it paints from the race file's
    # candidates alone, the file's check (every agent's adapter, git) and the Race come after;
    # 1.8-2.7x and 2.1-2.2x when it checked the file first), with headroom.
    for screen, wall_ratio, cpu_ratio in (("home", 2.5, 3.0), ("race", 2.6, 3.0)):
        assert figures[screen]["ratio"] <= wall_ratio, (screen, figures)
        assert figures[screen]["cpu_ratio"] <= cpu_ratio, (screen, figures)
    # The absolute target, twice over, where the machine paints a bare Textual app well within it
    # (214-243 ms when this machine was quiet): on a machine too loaded for that, the ratios above
    # are what can be told (a full run beside others' saw the bare app take 470 ms, the race
    # screen 1037 ms: 2.2x, as on a quiet machine).
    if figures["bare_textual_ms"] <= 300:
        for screen in ("home", "race"):
            assert figures[screen]["ms"] <= 1000, (screen, figures)


def test_isolation_cost_per_attempt_against_the_unisolated_sandbox():
    from tests.benchmarks import bench_isolation

    figures = bench_isolation.isolation_cost(rounds=5)
    print(figures)
    if "skipped" in figures:
        pytest.skip(f"bubblewrap cannot run here: {figures['skipped']}")
    # Target: under 20 ms added per attempt. Not reached on this 2-core machine: 32-38 ms of a
    # race's wall time per attempt (8 attempts, two at a time, each running three fenced commands:
    # its agent, its validation, its score; 57-61 ms unisolated, 89-98 ms isolated) at load
    # 0.5-1, 37-59 ms in full runs of the suite, against 53-99 ms before the work that follows.
    # Its parts, timed beside it: bubblewrap around a command 3.5-7 ms (new mount and pid
    # namespaces, /dev and /proc: the kernel's work, little of it this process's); a private
    # repository 2-6 ms, two per attempt (files only: one template per race holds the refs and
    # settings, read once in 4-6 ms; 7-17 ms each before, with two git calls); bringing the
    # result in 9.5-15 ms (pack-objects streamed into index-pack --strict, read-tree, the branch
    # moved through the race's update-ref session; 18-31 ms before, five git calls).
    # What a loaded disk or machine cannot inflate is asserted against raw work timed beside it,
    # round by round: a private repository costs 0.37-0.40x a `git init` (six runs, load 0.5-2;
    # one git process more would be over 1x), the import 1.01-1.16x its own processes run
    # directly (pack-objects into index-pack, read-tree, update-ref; its tip read from the file
    # the commit wrote, as the engine reads it): two processes more, or a pack held in memory,
    # would be over 1.5x.
    assert figures["bwrap_spawn_added_ms"] <= 15, figures
    assert figures["make_private_vs_git_init"] <= 0.75, figures
    assert figures["import_vs_raw_processes"] <= 1.5, figures
    if _loaded() is None:
        assert figures["added_ms_per_attempt"] <= 120, figures
