"""`kafkaesque`: run a test, re-check a stored one, list runs, clean up after crashes, check any history.

Exit status, for every command: 0 valid, 1 invalid, 2 unknown, 3 the harness failed or the input is
bad (a usage error too), 130 interrupted. The root command is guarded (_GuardedGroup): an exception a command lets
escape is a harness bug, and ends in exit 3 with one sentence and the traceback in a file, never in
a traceback on the terminal with exit 1, the code that means "invalid".
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# typer vendors click (typer._click) and re-exports none of its exception classes.
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer._click.utils import PacifyFlushWrapper
from typer.core import TyperArgument, TyperGroup, TyperOption

from kafkaesque_harness.harness.cluster_cli import (
    BrokerVariantOption,
    FlushPolicyOption,
    UncleanRecoveryOption,
    cluster_app,
    image_app,
)
from kafkaesque_harness.harness.console import (
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    OutputClosed,
    err,
    fail,
    fail_all,
    silence_stdout,
)
from kafkaesque_harness.harness.exits import INTERRUPTED
from kafkaesque_harness.history.extras import MissingExtra, dist_version
from kafkaesque_harness.nemesis.registry import nemesis_help, parse_nemesis_options
from kafkaesque_harness.results.pipeline.cli import pipeline_app
from kafkaesque_harness.results.store import format_problem
from kafkaesque_harness.workloads.registry import parse_workload_options

SIM_HASH_SEED = "0"  # `kafkaesque sim` runs with this PYTHONHASHSEED (harness/simulate.py)
EXIT_STATUS = ("Exit status: 0 valid, 1 invalid, 2 unknown, 3 the harness failed or the input is bad "
               "(a bad option or a missing argument too), 130 interrupted (Ctrl-C, SIGTERM or SIGHUP: what "
               "had started was healed and stored, its verdict unknown).")


class _GuardedGroup(TyperGroup):
    """The root command: every way out of it is an exit status of EXIT_STATUS.

    click ends a usage error with 2, which here means "unknown", and an exception with a traceback
    and 1, which means "invalid"; both become 3 with one sentence. typer.Exit and SystemExit keep
    their codes.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        conventional(self)
        try:
            # Not standalone: click hands back usage errors and aborts instead of printing and exiting
            # with its own codes, and returns the code of a typer.Exit.
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
            sys.stdout.flush()  # here, not at the interpreter's exit: a closed pipe is then caught below
        except NoArgsIsHelpError:
            code = EXIT_HARNESS  # the help was printed already: nothing was asked
        except UsageError as e:
            where = f"; see `{e.ctx.command_path} --help`" if e.ctx is not None else ""
            err.print(f"[red]error:[/] {escape(_one_line(e.format_message()).rstrip('.'))}{escape(where)}.")
            code = EXIT_HARNESS
        except ClickException as e:
            err.print(f"[red]error:[/] {escape(_one_line(e.format_message()))}")
            code = EXIT_HARNESS
        except (typer.Abort, KeyboardInterrupt):
            err.print(f"[red]error:[/] {INTERRUPTED}")
            code = EXIT_INTERRUPTED
        except (OutputClosed, BrokenPipeError):
            code = _output_closed()
        except SystemExit:
            if not isinstance(sys.stdout, PacifyFlushWrapper):
                raise
            code = _output_closed()  # typer's answer to a broken pipe in a command: sys.exit(1), "invalid"
        except MissingExtra as e:  # not a bug: the command needs an optional dependency (history/extras.py)
            err.print(f"[red]error:[/] {escape(str(e))}")
            code = EXIT_HARNESS
        except Exception as e:  # noqa: BLE001 - the guard: any escaping exception is a harness bug
            err.print(f"[red]error:[/] {escape(harness_failure(e))}")
            code = EXIT_HARNESS
        if standalone_mode:
            sys.exit(code)
        return code


_METAVARS = {str: "TEXT", int: "N", float: "NUMBER"}


def conventional(command: Any) -> None:
    """The conventions of pytest's, docker's and kubectl's help, applied once to every command: a boolean
    option is a flag of one name (typer gives each a --no-<name> twin: --no-panel / --no-no-panel), and an
    option's value is named by a word, not a Python type (<list[str]>)."""
    for param in command.params:
        if isinstance(param, TyperArgument):
            # FILE in the usage line and the list, as click and pytest write it (typer: {file} and file <path>)
            shown = param.name.upper() + ("..." if param.nargs != 1 else "")
            param._usage_display_name = lambda shown=shown: shown
            param._rich_display_name = lambda shown=shown: shown
            param.display_type_rich = lambda ctx=None: ""
        if not isinstance(param, TyperOption):
            continue
        if param.is_flag and param.secondary_opts and param.default is False:
            param.secondary_opts = []
        if param.metavar is None and not param.is_flag:
            annotation = param.type_descriptor.annotation
            inner = getattr(annotation, "__args__", (annotation,))[0]
            param.metavar = _METAVARS.get(inner, "TEXT")
    for sub in getattr(command, "commands", {}).values():
        conventional(sub)


def _output_closed() -> int:
    """A closed stdout (`kafkaesque ... | head`): one sentence on stderr and exit 3, never 1 ("invalid")."""
    silence_stdout()
    err.print("[red]error:[/] the reader of kafkaesque's output closed the pipe before all of it was "
              "written (e.g. `| head`); nothing else failed.")
    return EXIT_HARNESS


def harness_failure(e: BaseException) -> str:
    """The one sentence for an exception that escaped a command; its traceback goes to a file."""
    text = "".join(traceback.format_exception(e))
    where = _write_traceback(text)
    said = f"kafkaesque failed: {type(e).__name__}: {_one_line(str(e))[:300]}".rstrip(": ")
    if where is None:
        return f"{said}; the traceback could not be written to a file, so here it is: {_one_line(text)}"
    return f"{said}; the traceback is in {where}"


def _write_traceback(text: str) -> Path | None:
    """<cache>/kafkaesque/crash-<time>-<pid>.txt ($XDG_CACHE_HOME or ~/.cache), else the temp dir."""
    name = f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafkaesque"
    for folder in (cache, Path(tempfile.gettempdir()) / "kafkaesque"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
            return folder / name
        except OSError:
            continue
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


app = typer.Typer(add_completion=True, no_args_is_help=True, cls=_GuardedGroup, epilog=EXIT_STATUS,
                  pretty_exceptions_show_locals=False,  # locals may hold secrets (SSH keys, cluster files)
                  # click's plain help, as pytest's and docker's: rich's boxed panels cut option names at 80
                  # columns ("--replication-fact…"); -h beside --help at every level
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Kafkaesque: a Jepsen-style fault-injection harness for Kafka-style replicated logs.")


def _print_version(asked: bool) -> None:
    if asked:
        print(f"kafkaesque {dist_version()}")
        raise typer.Exit()


@app.callback()
def _root(show_version: Annotated[bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True,
                                                     help="Print the version and exit.")] = False) -> None:
    """Kafkaesque: a Jepsen-style fault-injection harness for Kafka-style replicated logs."""


app.add_typer(image_app, name="image")
app.add_typer(cluster_app, name="cluster")
app.add_typer(pipeline_app, name="pipeline")


@app.command()
def run(
    workload: Annotated[str, typer.Option(help="workload name (queue, txn)")] = "queue",
    workload_option: Annotated[list[str] | None, typer.Option(metavar="KEY=VALUE", help="a workload's own setting "
                                                                   "(repeatable; VALUE read as JSON, else text): "
                                                                   "README lists them")] = None,
    nemesis: Annotated[str, typer.Option(help=nemesis_help())] = "",
    nemesis_option: Annotated[list[str] | None, typer.Option(metavar="KEY=VALUE", help="a fault's own setting (repeatable); "
                                                                  "`kafkaesque faults` lists them")] = None,
    nemesis_interval: Annotated[float, typer.Option(help="mean seconds between fault starts and stops")] = 10.0,
    nemesis_schedule: Annotated[str, typer.Option(help="mix: a random fault toggled each interval, so different "
                                                       "faults overlap; sequential: one fault at a time")] = "mix",
    nemesis_target: Annotated[str, typer.Option(help="mixed (each fault draws one of random-node, leader, "
                                                     "minority, majority, all), random-node, leader, controller, "
                                                     "minority, majority, all, isr-member, last-isr-member, or a "
                                                     "partition shape")] = "mixed",
    time_limit: Annotated[float, typer.Option(help="seconds of the main phase")] = 60.0,
    concurrency: Annotated[int, typer.Option(help="client processes")] = 10,
    rate: Annotated[float, typer.Option(help="target ops/s over all clients (0: unlimited)")] = 100.0,
    brokers: Annotated[int, typer.Option()] = 3,
    controllers: Annotated[int, typer.Option(help="controllers: 1, or an odd quorum (3, 5) replicating the "
                                                  "metadata log with Raft (local and docker clusters)")] = 1,
    replication_factor: Annotated[int, typer.Option()] = 3,
    min_isr: Annotated[int, typer.Option()] = 2,
    partitions: Annotated[int, typer.Option(help="partitions of the test topic (the queue's keys)")] = 4,
    acks: Annotated[str, typer.Option(help="all, 1 or 0")] = "all",
    client: Annotated[str, typer.Option(help="kafka-python or confluent-kafka")] = "kafka-python",
    cluster: Annotated[str, typer.Option(help="auto (docker when an engine answers, else local), docker, local, "
                                             "FILE.toml (a cluster file: any Kafka-protocol cluster, format in "
                                             "README's Cluster file reference), or ssh:FILE.toml (our broker over SSH, "
                                             "clusters/ssh.py)")] = "auto",
    flush_policy: FlushPolicyOption = "never",
    broker_variant: BrokerVariantOption = "default",
    unclean_recovery_strategy: UncleanRecoveryOption = "balanced",
    replica_fetch_max_bytes: Annotated[int, typer.Option(help="our broker's replica.fetch.max.bytes (0: its "
                                                              "default, 4 MiB)")] = 0,
    hwm_checkpoint_interval_ms: Annotated[int, typer.Option(help="our broker's HWM checkpoint interval (0: its "
                                                                 "default, 1000 ms)")] = 0,
    seed: Annotated[int, typer.Option()] = 0,
    store: Annotated[str, typer.Option(help="where runs are stored")] = "store",
    name: Annotated[str, typer.Option(help="test name (store folder); default: the workload")] = "",
    leave_running: Annotated[bool, typer.Option(help="keep the cluster up after the run")] = False,
    recovery_wait: Annotated[float, typer.Option(help="seconds to let the cluster recover after healing")] = 10.0,
    no_panel: Annotated[bool, typer.Option(help="no live panel (the default when not on a terminal)")] = False,
    elle: Annotated[bool, typer.Option(help="also check the history with the Elle-style cycle checker")] = False,
    from_run: Annotated[Path | None, typer.Option("--from", help="repeat a stored run: every setting (and the "
                                                                 "cluster file) from RUN_DIR/test.json; only "
                                                                 "--store and --no-panel apply")] = None,
    node_code: Annotated[str, typer.Option(help="a directory holding a copy of the kafkaesque_harness package "
                                                "(its __init__.py and clusters/) for the nodes to run instead of "
                                                "this tree's (local and docker; `kafkaesque mutate` makes such "
                                                "copies)")] = "",
) -> None:
    """Run one test: cluster up, workload + faults, heal, final reads, check, store. Prints the run dir last."""
    from kafkaesque_harness.harness.runner import HarnessError, run_test
    from kafkaesque_harness.harness.spec import TestSpec
    from kafkaesque_harness.results.store import StoreError

    faults = [n.strip() for n in nemesis.split(",") if n.strip()]
    nemesis_options, option_problems = parse_nemesis_options(nemesis_option or [])
    workload_options, workload_problems = parse_workload_options(workload_option or [])
    if option_problems or workload_problems:
        fail_all(option_problems + workload_problems)
    spec = TestSpec.make(name=name or workload, workload=workload, nemesis=faults, nemesis_interval=nemesis_interval,
                    nemesis_schedule=nemesis_schedule,
                    nemesis_target=nemesis_target, time_limit=time_limit, concurrency=concurrency, rate=rate,
                    brokers=brokers, controllers=controllers, replication_factor=replication_factor, min_isr=min_isr, partitions=partitions,
                    acks=acks, client=client, cluster=cluster, flush_policy=flush_policy,
                    broker_variant=broker_variant, unclean_recovery_strategy=unclean_recovery_strategy,
                    replica_fetch_max_bytes=replica_fetch_max_bytes,
                    hwm_checkpoint_interval_ms=hwm_checkpoint_interval_ms, seed=seed, store=store, leave_running=leave_running,
                    recovery_wait=recovery_wait, elle=elle, nemesis_options=nemesis_options,
                    workload_options=workload_options,
                    node_code=os.path.abspath(node_code) if node_code else "")
    if from_run is not None:
        try:
            spec, notes = TestSpec.from_run_dir(from_run)
        except ValueError as e:
            fail(f"{e}.")
        spec.store = store if store != "store" else spec.store
        for note in notes:
            err.print(note)
    file_brokers = spec.cluster_file_brokers()
    if file_brokers is not None:  # the cluster or node file decides; --brokers would only contradict it
        note = spec.take_file_brokers(file_brokers)
        if note:
            err.print(note)
    problems = spec.problems("flag")  # every setting checked before anything starts (harness/spec.py)
    if problems:
        fail_all(problems)
    try:
        code, run_dir = run_test(spec, log=lambda m: err.print(m), panel=not no_panel and sys.stderr.isatty())
    except StoreError as e:
        fail(str(e))
    except HarnessError as e:
        fail(str(e))
    _print_verdict(run_dir)
    print(run_dir)
    raise typer.Exit(code)


@app.command()
def sim(
    seed: Annotated[int, typer.Option(help="the seed: the same seed and settings give the same run, byte for byte")] = 0,
    workload: Annotated[str, typer.Option(help="queue or txn (their simulated clients, workloads/sim/)")] = "queue",
    workload_option: Annotated[list[str] | None, typer.Option(metavar="KEY=VALUE", help="a workload's own setting "
                                                                   "(repeatable; as for run)")] = None,
    nemesis: Annotated[str, typer.Option(help="faults, comma-separated: kill, pause, partition, lossy-crash, "
                                              "clock (on a node drawn from the seed), protocol (the protocol "
                                              "nemesis's moves and sequences, aimed at roles)")] = "",
    nemesis_schedule: Annotated[str, typer.Option(help="sequential: one fault at a time; mix: faults overlap (a "
                                                       "random fault toggled each interval, as in real runs)")
                                ] = "sequential",
    nemesis_interval: Annotated[float, typer.Option(help="mean virtual seconds between a fault's start and "
                                                         "stop, and between faults")] = 10.0,
    time_limit: Annotated[float, typer.Option(help="virtual seconds of the main phase")] = 60.0,
    concurrency: Annotated[int, typer.Option(help="client processes")] = 10,
    rate: Annotated[float, typer.Option(help="target ops/s over all clients, in virtual time")] = 100.0,
    brokers: Annotated[int, typer.Option()] = 3,
    controllers: Annotated[int, typer.Option(help="controllers: 1, or an odd quorum (3, 5)")] = 1,
    replication_factor: Annotated[int, typer.Option()] = 3,
    min_isr: Annotated[int, typer.Option()] = 2,
    partitions: Annotated[int, typer.Option(help="partitions of the test topic")] = 4,
    acks: Annotated[str, typer.Option(help="all, 1 or 0")] = "all",
    flush_policy: FlushPolicyOption = "never",
    broker_variant: BrokerVariantOption = "default",
    store: Annotated[str, typer.Option(help="where runs are stored")] = "store",
    name: Annotated[str, typer.Option(help="test name (store folder); default: sim-<workload>")] = "",
    recovery_wait: Annotated[float, typer.Option(help="virtual seconds to let the cluster recover after "
                                                      "healing")] = 10.0,
    schedule: Annotated[str, typer.Option(help="a fault schedule to apply instead of drawing one (a run dir's "
                                               "fault-schedule.json); its faults replace --nemesis")] = "",
    shrink: Annotated[bool, typer.Option(help="when the run is invalid, look for a smaller schedule and settings "
                                              "that fail the same way; write it and its scenario file")] = False,
    shrink_budget: Annotated[int, typer.Option(help="at most this many candidate runs for --shrink")] = 30,
    shrink_keep: Annotated[str, typer.Option(help="--shrink keeps a candidate failing with any of the run's "
                                                  "anomaly kinds, all of them, or the checker:kind,... named")] = "any",
    shrink_jitter: Annotated[float, typer.Option(help="--shrink keeps a candidate only when its faults shifted this "
                                                      "many virtual s later and earlier fail so too")] = 0.0,
    mutant: Annotated[str, typer.Option(help="run this mutant of the broker (clusters/mutants.py; `kafkaesque "
                                             "mutate --list`)")] = "",
    swarm: Annotated[bool, typer.Option(help="the seed draws its own fault mix, cluster, flush policy, clients and "
                                             "BUGGIFY points (harness/sim_swarm.py), replacing those options")
                     ] = False,
) -> None:
    """Run one test in the deterministic simulator: the reference cluster's own nodes and the workload's
    simulated clients in this process, in virtual time, under one seed; stored and checked as a real run
    (test.json says "simulated"). Prints the run dir last."""
    if os.environ.get("PYTHONHASHSEED") != SIM_HASH_SEED:
        # the order of sets of strings must be the same in every run of a seed: this process again, fixed
        env = {**os.environ, "PYTHONHASHSEED": SIM_HASH_SEED}
        os.execve(sys.executable, [sys.executable, "-c", "import sys; from kafkaesque_harness.harness.cli import "
                                   "main; sys.argv[0] = 'kafkaesque'; main()", *sys.argv[1:]], env)
    copy = None
    if mutant:  # before the simulator is imported: the broker it loads is then the mutant's copy
        from kafkaesque_harness.clusters.sim.mutant import mutant_code

        try:
            copy = mutant_code(mutant)
        except ValueError as e:
            fail(f"{e}.")
    from kafkaesque_harness.harness.simulate import sim_problems, simulate
    from kafkaesque_harness.harness.spec import TestSpec
    from kafkaesque_harness.results.store import StoreError

    workload_options, workload_problems = parse_workload_options(workload_option or [])
    if workload_problems:
        fail_all(workload_problems)
    spec = TestSpec.make(name=name or f"sim-{workload}", workload=workload,
                         nemesis=[n.strip() for n in nemesis.split(",") if n.strip()],
                         nemesis_interval=nemesis_interval, nemesis_schedule=nemesis_schedule,
                         time_limit=time_limit, concurrency=concurrency, rate=rate, brokers=brokers, controllers=controllers,
                         replication_factor=replication_factor, min_isr=min_isr, partitions=partitions, acks=acks,
                         flush_policy=flush_policy, broker_variant=broker_variant, seed=seed,
                         store=store, recovery_wait=recovery_wait, workload_options=workload_options)
    # the settings a simulated run shares with a real one are checked as for run; the cluster and the faults
    # are the simulator's own (sim_problems)
    shared = [n for n in TestSpec.setting_names() if n != "cluster" and not n.startswith("nemesis")]
    if shrink_keep not in ("any", "all") and ":" not in shrink_keep:
        fail(f"--shrink-keep is {shrink_keep!r}; valid: any, all, or anomaly kinds as checker:kind,...")
    drawn = None
    if swarm:
        from kafkaesque_harness.harness.sim_swarm import swarm_spec

        spec, drawn = swarm_spec(spec)
    given = None
    if schedule:
        from kafkaesque_harness.harness.sim_shrink import read_given_schedule

        spec, given, schedule_problems = read_given_schedule(spec, schedule)
        if schedule_problems:
            fail_all(schedule_problems)
    problems = sim_problems(spec) + spec.problems("flag", only=shared)
    if problems:
        fail_all(problems)
    mutant_info = {"mutant": mutant, "digest": copy.digest} if copy is not None else None
    try:
        code, run_dir = simulate(spec, log=lambda m: err.print(m), mutant=mutant_info, schedule=given, swarm=drawn)
        _print_verdict(run_dir)
        if shrink:  # while the mutant's copy is loaded: every candidate runs it
            from kafkaesque_harness.harness.sim_shrink import shrink_run

            shrink_run(spec, run_dir, shrink_budget, log=lambda m: err.print(m, markup=False, highlight=False),
                       keep=shrink_keep, jitter_s=shrink_jitter, mutant=mutant_info, swarm=drawn)
    except StoreError as e:
        fail(str(e))
    finally:
        if copy is not None:
            copy.close()
    print(run_dir)
    raise typer.Exit(code)


@app.command()
def doctor(as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False) -> None:
    """What this machine offers (Docker engine, node image, root, namespaces, iptables, tc and netem, FUSE, Java
    for Spark, free ports), with the fix for each missing part. Exit 0 when the default cluster can run."""
    from kafkaesque_harness.harness.doctor import (
        diagnose,  # here, like the other commands' imports: it loads the cluster code
    )

    found = diagnose()
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        table = Table("check", "", "detail", "fix (needed for)", box=None, pad_edge=False)
        for f in found["findings"]:
            fix = "" if f["ok"] else f"{f['fix']}" + (f" ({f['needed_for']})" if f["needed_for"] else "")
            table.add_row(f["name"], "[green]yes[/]" if f["ok"] else "[red]no[/]", escape(f["detail"]), escape(fix))
        Console().print(table)
        print(f"the default cluster runs here as: {found['default_cluster']}" if found["can_run"] else
              "the default cluster cannot run here: not even local processes can listen on 127.0.0.1")
    raise typer.Exit(0 if found["can_run"] else EXIT_HARNESS)


@app.command()
def faults(as_json: Annotated[bool, typer.Option("--json", help="one JSON document on stdout instead of the "
                                                                 "text")] = False) -> None:
    """List the faults --nemesis takes: what each does, its options (--nemesis-option KEY=VALUE) and needs,
    and the scenarios (scenario:NAME)."""
    from kafkaesque_harness.nemesis.kinds import all_kinds
    from kafkaesque_harness.nemesis.registry import SCENARIO_PREFIX
    from kafkaesque_harness.nemesis.scenarios import SCENARIOS

    kinds = [{"name": k.name, "help": k.help, "self_driven": k.self_driven,
              "options": [{"key": o.key, "type": o.kind.__name__, "default": o.default, "choices": list(o.choices or []),
                           "help": o.help} for o in k.options],
              "needs": [need.why for need in k.abilities],
              "capabilities": {"on": "every node" if k.on == "all" else "the brokers", "tools": list(k.capabilities)}}
             for k in all_kinds().values()]
    scenarios = [{"name": SCENARIO_PREFIX + s.name, "help": s.doc, "targets": list(s.targets),
                  "needs_isolated_nodes": s.needs_isolated_nodes, "steps": len(s.steps)} for s in SCENARIOS.values()]
    if as_json:
        print(json.dumps({"faults": kinds, "scenarios": scenarios}, indent=2, default=str))
        return
    for k in kinds:
        print(f"{k['name']}{'  (times its own faults)' if k['self_driven'] else ''}\n    {k['help']}")
        for o in k["options"]:
            choices = f" ({'|'.join(map(str, o['choices']))})" if o["choices"] else ""
            print(f"    --nemesis-option {o['key']}={o['default']}{choices}: {o['help']}")
        for why in k["needs"]:
            print(f"    {why}")
        if k["capabilities"]["tools"]:
            print(f"    needs on {k['capabilities']['on']}: {', '.join(k['capabilities']['tools'])}")
    print("\nscenarios (--nemesis scenario:NAME, or scenario:FILE.toml of your own; each times its own faults):")
    for s in scenarios:
        targets = f" (catches {', '.join(s['targets'])})" if s["targets"] else ""
        print(f"{s['name']}{targets}\n    {s['help']}")


def _print_verdict(run_dir: Path) -> None:
    try:
        res = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        err.print("[red]no results were written[/]")
        return
    if not isinstance(res, dict):
        err.print("[red]no results were written[/] (results.json is not a JSON object)")
        return
    from kafkaesque_harness.harness.check_cli import (
        example_line,
        print_attribution,
        print_unknown_reasons,
        whose_counts,
    )

    if res.get("error"):
        # A harness failure (exit 3) is never a verdict: the one sentence that says why, and where the run is.
        err.print(f"[red]error:[/] {escape(str(res['error']))}")
        err.print(f"  report: {run_dir / 'report.html'}")
        return
    v = res.get("valid")
    colour = {True: "green", False: "red"}.get(v, "yellow")
    err.print(f"[bold {colour}]valid: {v}[/]")
    print_unknown_reasons(err, res)
    print_attribution(err, res)
    for reason in ("interrupted", "final_reads"):
        if res.get(reason):
            err.print(f"  {reason}: {res[reason]}")
    if isinstance(res.get("availability"), dict):
        from kafkaesque_harness.checkers.availability import availability_sentence

        err.print(f"  availability: {escape(availability_sentence(res['availability']))}")
    for cname, c in (res.get("checkers") or {}).items():
        for a in c.get("anomalies", []):
            err.print(f"  [red]{cname}: {a['name']} x{a['count']}[/]{escape(whose_counts(a))}")
            for ex in a.get("examples", [])[:3]:
                if ex.get("summary"):
                    err.print(f"    - {escape(example_line(ex))}")
    err.print(f"  report: {run_dir / 'report.html'}")


@app.command()
def analyze(run_dir: Annotated[Path, typer.Argument(help="a stored run directory")],
            as_json: Annotated[bool, typer.Option("--json", help="one JSON document on stdout instead of the text")] = False) -> None:
    """Re-check a stored run offline (its history, node dumps and the harness's facts in results.json); rewrites
    results.json (identically, for a run of this version) and prints the verdict (--json: results.json's
    content)."""
    from kafkaesque_harness.harness.runner import analyze_run, exit_code
    from kafkaesque_harness.harness.spec import TestSpec
    from kafkaesque_harness.history import HistoryFormatError
    from kafkaesque_harness.results.store import write_json

    if not (run_dir / "test.json").exists() or not (run_dir / "history.jsonl").exists():
        fail(f"{run_dir} is not a run directory (it needs test.json and history.jsonl); see `kafkaesque ls`.")
    test = _run_json(run_dir / "test.json", RESTORE_TEST_JSON)
    too_new = format_problem(test, run_dir / "test.json")
    if too_new:
        fail(too_new + ".")
    # The settings the workload's checkers are built from; the others were the run's business.
    problems = TestSpec.from_dict(test).problems("key", only=("workload", "partitions", "client",
                                                              "workload_options"))
    if problems:
        fail(f"{run_dir / 'test.json'}: {problems[0]}")
    test["run_dir"] = str(run_dir)  # where the node state dumps are now, wherever the store moved
    old = run_dir / "results.json"
    # Read before checking: a previous verdict's error or interruption must not be lost to a corrupt file.
    previous = _run_json(old, "delete it to re-check the run from its history alone (the error, interruption "
                              "and final-read notes it held are lost with it)") if old.exists() else None
    try:
        # The same check as the run's own (the harness's facts come from the previous results.json).
        results = analyze_run(run_dir, test, previous)
    except HistoryFormatError as e:
        fail(f"{str(e).rstrip('.')}; restore the run's history from a copy to check it.")
    except OSError as e:
        fail(f"cannot read {run_dir / 'history.jsonl'} ({e.strerror or e}); make the run's history readable.")
    try:
        write_json(old, results)
        from kafkaesque_harness.results.report import render_report

        render_report(run_dir)  # the report the verdict line names, of these results
    except OSError as e:
        fail(f"cannot write into {run_dir} ({e.strerror or e}); make the run directory writable.")
    if as_json:
        print(json.dumps(results, indent=2, default=str))
    else:
        _print_verdict(run_dir)
        print(run_dir)
    raise typer.Exit(exit_code(results["valid"]))


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="a stored run directory")]) -> None:
    """(Re)write a run's self-contained HTML report and print its path."""
    from kafkaesque_harness.history import HistoryFormatError
    from kafkaesque_harness.results.report import render_report

    if not (run_dir / "test.json").exists():
        fail(f"{run_dir} is not a run directory (it needs test.json); see `kafkaesque ls`.")
    _run_json(run_dir / "test.json", RESTORE_TEST_JSON)  # render_report reads them bare: check them first
    if (run_dir / "results.json").exists():
        _run_json(run_dir / "results.json",
                  f"delete it and run `kafkaesque analyze {run_dir}` to check the run again")
    try:
        print(render_report(run_dir))
    except HistoryFormatError as e:
        fail(f"{str(e).rstrip('.')}; the report needs the run's history whole: restore it from a copy.")
    except OSError as e:
        fail(f"cannot read {e.filename or run_dir} ({e.strerror or e}); make the run's files readable.")


RESTORE_TEST_JSON = ("it is the run's spec, written when the run started: restore it from a copy, or run the "
                     "test again")


def _run_json(path: Path, fix: str) -> dict[str, Any]:
    """A stored run's JSON file as a dict, or exit 3 with one sentence naming the file, what is wrong and `fix`."""
    try:
        doc = json.loads(path.read_bytes())
    except OSError as e:
        fail(f"cannot read {path} ({e.strerror or e}); {fix}.")
    except UnicodeDecodeError:
        fail(f"{path} is not text (it holds bytes that are not UTF-8); {fix}.")
    except json.JSONDecodeError as e:
        what = ("ends before its JSON does" if e.pos >= len(e.doc)
                else f"is not valid JSON ({e.msg}, line {e.lineno} column {e.colno})")
        fail(f"{path} {what}; {fix}.")
    if not isinstance(doc, dict):
        fail(f"{path} holds a JSON {type(doc).__name__} where a JSON object belongs; {fix}.")
    return doc


VERDICTS = ("valid", "invalid", "unknown")


@app.command("ls")
def list_runs(store: Annotated[str, typer.Option(help="where runs are stored")] = "store",
              last: Annotated[int, typer.Option("--last", help="only the newest N runs (after the other filters; "
                                                              "0: all)")] = 0,
              verdict: Annotated[str, typer.Option(help="only runs of this verdict: valid, invalid or "
                                                        "unknown")] = "",
              name: Annotated[str, typer.Option(help="only runs whose test name contains this text")] = "",
              as_json: Annotated[bool, typer.Option("--json", help="one JSON document on stdout instead of the text")] = False) -> None:
    """Runs in the store with their verdicts, newest first (--json: a JSON list, [] for none)."""
    from kafkaesque_harness.results.store import list_runs as runs_in

    if verdict and verdict not in VERDICTS:
        fail(f"unknown --verdict {verdict!r}; valid: {', '.join(VERDICTS)}.")
    if last < 0:
        fail(f"--last {last} is below 0; give how many of the newest runs to list (0: all).")
    word = {True: "valid", False: "invalid"}
    runs = [r for r in runs_in(store) if (not verdict or word.get(r.valid, "unknown") == verdict)
            and name in r.test]
    runs = runs[:last] if last else runs
    if as_json:
        print(json.dumps([{"started": r.started, "test": r.test, "valid": r.valid, "anomalies": r.anomalies,
                           "workload": r.workload, "nemesis": r.nemesis, "path": str(r.path)} for r in runs],
                         indent=2, default=str))
        return
    if not runs:
        err.print(f"no runs in {store}" + (" match" if verdict or name else ""))
        return
    t = Table("started", "test", "valid", "anomalies", "workload", "nemesis", "path")
    for r in runs:
        colour = {True: "green", False: "red"}.get(r.valid, "yellow")
        t.add_row(r.started, r.test, f"[{colour}]{r.valid}[/]", ", ".join(r.anomalies), r.workload, r.nemesis,
                  str(r.path))
    out = Console()
    if not out.is_terminal:
        out = Console(width=240)  # piped into a file or CI log: do not squeeze the columns
    out.print(t)


@app.command()
def cleanup(
    run: Annotated[str, typer.Option("--run", help="only this run's leftovers (its run id, as the other modes "
                                                   "print it); refused while the run is live")] = "",
    dry_run: Annotated[bool, typer.Option(help="list what would be removed, and remove nothing")] = False,
    all_dead: Annotated[bool, typer.Option(help="the leftovers of every run whose harness is gone (the "
                                                "default)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="with --dry-run: what would be removed and what is left "
                                                         "alone, as one JSON object")] = False,
) -> None:
    """Heal and remove what runs whose harness is gone left behind: processes (paused ones too), lossy mounts,
    network namespaces, bridges and rules, containers and networks, and the faults on the nodes of SSH and
    external clusters. A live run is skipped and named; a thing no run registered here owns is left alone
    (clusters/ownership.py, docs/SAFETY.md)."""
    from kafkaesque_harness.clusters.cleanup import RunIsLive, carry_out, plan_cleanup

    if run and all_dead:
        fail("--run and --all-dead contradict each other; give one of them.")
    try:
        plan = plan_cleanup(run)
    except RunIsLive as e:
        fail(str(e))
    if run and not plan.remove:
        fail(f"no run {run!r} is registered on this machine and nothing it left behind was found: the id is "
             "mistyped, or the run ended cleanly; `kafkaesque cleanup --dry-run` lists what dead runs left behind.")
    if not run:
        for record in plan.live:
            held = len(plan.skipped_live.get(record.owner, []))
            err.print(f"skipped live {escape(record.describe())}" + (f": {held} thing(s) of it left alone" if held
                                                                      else ""))
        for owner, items in plan.unverified.items():
            err.print(f"left alone {len(items)} thing(s) of {escape(owner)}, which no run registered on this machine "
                      f"owns (an older kafkaesque, another user or another host), e.g. {escape(items[0].what)}; "
                      f"`kafkaesque cleanup --run RUN` removes a run's things once you know it is over")
    if as_json and not dry_run:
        fail("--json goes with --dry-run (a cleanup that removes things reports as it goes); add --dry-run.")
    if as_json:
        print(json.dumps({"would_remove": [item.what for item in plan.remove],
                          "live_runs": [record.describe() for record in plan.live] if not run else [],
                          "left_alone": {owner: [i.what for i in items] for owner, items in plan.unverified.items()}
                          if not run else {}}, indent=2))
        return
    if dry_run:
        for item in plan.remove:
            err.print(f"would remove {escape(item.what)}")
        err.print(f"cleanup --dry-run: {len(plan.remove)} leftover(s) would be removed; nothing was removed"
                  if plan.remove else "cleanup --dry-run: nothing left behind")
        return
    removed, failed = carry_out(plan, lambda m: err.print(escape(m)))
    if failed:
        fail(f"cleanup removed {removed} leftover(s) but not {failed} (see above); fix what they say and run "
              "`kafkaesque cleanup` again.")
    err.print(f"cleanup: {removed} leftover(s) removed" if removed else "cleanup: nothing left behind")


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="a history file")],
    format: Annotated[str, typer.Option(help="jsonl, edn, porcupine-etcd, porcupine-kv")] = "jsonl",
    model: Annotated[str, typer.Option(help="queue, register, cas-register, etcd, kv, log, list-append, txn "
                                            "(default: from the format)")] = "",
    time_limit: Annotated[float, typer.Option(help="checker budget in seconds")] = 60.0,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON document on stdout instead of the text")] = False,
    option: Annotated[list[str] | None, typer.Option(help="KEY=VALUE, a test setting the checker reads (repeatable; "
                                                          "VALUE read as JSON): for txn sub_via, subscribe_p, "
                                                          "ww_deps, rw_deps, allowed")] = None,
) -> None:
    """Check any history file and print the verdict; exit 0 valid, 1 invalid, 2 unknown. --json prints the
    checkers' whole results (verdict, anomalies with examples, unknown reasons) as one JSON object."""
    try:
        from kafkaesque_harness.harness.check_cli import check_command
    except ImportError:
        fail("the history checker command is not available in this build.")
    raise typer.Exit(check_command(str(file), format, model or None, time_limit, as_json, option or []))


@app.command()
def campaign(
    file: Annotated[Path, typer.Argument(help="a campaign TOML file (see campaigns/nightly.toml)")],
    dry_run: Annotated[bool, typer.Option(help="print the expanded matrix and run nothing")] = False,
    cluster: Annotated[str, typer.Option(help="auto, docker, local, FILE.toml or ssh:FILE.toml (default: the "
                                             "file's, else auto)")] = "",
    store: Annotated[str, typer.Option(help="where runs and campaign directories are stored")] = "store",
    no_panel: Annotated[bool, typer.Option(help="no live panel (the default when not on a terminal)")] = False,
) -> None:
    """Run a matrix of tests one after another within a time budget; write campaign.json, junit.xml, index.html.

    Exit 0 all valid, 1 any invalid, 2 any unknown and none invalid, 3 bad input. Prints the campaign dir last.
    """
    from kafkaesque_harness.harness.campaign import resolve_cluster, run_campaign
    from kafkaesque_harness.harness.campaign_file import CampaignFileError, load_campaign
    from kafkaesque_harness.results.store import StoreError

    try:
        plan = load_campaign(file, store=store, cluster=cluster or None)
    except CampaignFileError as e:
        fail(f"{file}: {e}")
    if dry_run:
        _print_campaign_plan(plan)
        return
    resolve_cluster(plan)
    err.print(f"campaign {plan.name}: {len(plan.runs)} runs on the {plan.cluster} cluster, "
              f"budget {plan.budget:.0f} s")
    try:
        code, campaign_dir = run_campaign(plan, log=lambda m: err.print(m), panel=not no_panel and sys.stderr.isatty())
    except StoreError as e:
        fail(str(e))
    doc = json.loads((campaign_dir / "campaign.json").read_text())
    err.print(f"campaign {plan.name}: " + ", ".join(f"{n} {s}" for s, n in doc["counts"].items() if n)
              + f"; index: {campaign_dir / 'index.html'}")
    print(campaign_dir)
    raise typer.Exit(code)


DETECTION_DIR = Path("campaigns/detection")


@app.command()
def detect(
    files: Annotated[list[Path] | None, typer.Argument(
        help="the detection campaigns, run in turn (default: every campaigns/detection/*.toml)")] = None,
    out: Annotated[Path, typer.Option(help="where the table goes")] = Path("docs/DETECTION.md"),
    from_campaign: Annotated[list[Path] | None, typer.Option(
        help="a campaign dir already run, added to the table (repeatable); with no files, only re-render")] = None,
    notes: Annotated[Path | None, typer.Option(help="a Markdown file appended to the table (notes by hand)")] = None,
    cluster: Annotated[str, typer.Option(help="auto, docker or local (default: the file's, else auto)")] = "",
    store: Annotated[str, typer.Option(help="where runs and campaign directories are stored")] = "store",
    section: Annotated[str, typer.Option(help="write the table as this named section of --out (e.g. txn), "
                                              "keeping the rest of the page")] = "",
    ledger: Annotated[Path | None, typer.Option(help="the ledger the campaigns are recorded in and the table is "
                                                     "made from (default with --section: DETECTION-runs.jsonl "
                                                     "beside --out)")] = None,
) -> None:
    """Run every fault plan against every broker variant (campaigns) and write the detection table.

    Each campaign file sets plans (scenarios, the protocol nemesis, plain random faults), variants,
    acks and flush settings, repetitions and budget; the table (docs/DETECTION.md by default) merges
    them and says per row how many runs found an anomaly, which, and how fast, above the three
    claims it exists for, computed from the rows. With --section the campaigns are kept in a committed
    ledger and the section is made from every campaign the ledger holds for it, so it survives the
    store (a fresh machine re-renders it from the ledger).
    """
    from kafkaesque_harness.results.store import command_as_shown
    from kafkaesque_harness.studies.detection import write_detection

    command = command_as_shown(["kafkaesque", "detect", *sys.argv[2:]])  # no path of this machine in the page
    dirs = list(from_campaign or [])
    for d in dirs:
        if not (d / "campaign.json").exists():
            fail(f"{d} holds no campaign.json; give a directory under <store>/campaigns/.")
    if notes is not None and not notes.is_file():
        fail(f"notes file {notes} does not exist; give a Markdown file, or leave --notes out.")
    note_text = notes.read_text() if notes is not None else ""
    if section and ledger is None:
        ledger = out.parent / "DETECTION-runs.jsonl"

    def write(dirs: list[Path]) -> Path:
        return write_detection(dirs, out, command, note_text, section=section, ledger=ledger)

    if not files and (dirs or ledger is not None):
        err.print(f"wrote {write(dirs)}")
        return
    files = files or sorted(DETECTION_DIR.glob("*.toml"))
    if not files:
        fail(f"no campaign files given and none in {DETECTION_DIR}; pass the campaign TOML files to run.")
    from kafkaesque_harness.harness.campaign import resolve_cluster, run_campaign
    from kafkaesque_harness.harness.campaign_file import CampaignFileError, load_campaign
    from kafkaesque_harness.results.store import StoreError

    plans = []
    for file in files:  # every file is read and checked before the first run starts
        try:
            plans.append(load_campaign(file, store=store, cluster=cluster or None))
        except CampaignFileError as e:
            fail(f"{file}: {e}")
    for plan in plans:
        resolve_cluster(plan)
        err.print(f"detect: campaign {plan.name}, {len(plan.runs)} runs on the {plan.cluster} cluster, "
                  f"budget {plan.budget:.0f} s")
        try:
            _, campaign_dir = run_campaign(plan, log=lambda m: err.print(m))
        except StoreError as e:
            fail(str(e))
        dirs.append(campaign_dir)
        # Rewritten after every campaign: a long detection run leaves a table at each step.
        err.print(f"wrote {write(dirs)} (campaign {campaign_dir})")
    print(out)


@app.command()
def mutate(
    mutant: Annotated[list[str] | None, typer.Option(help="a mutant to run (repeatable; default: the whole "
                                                          "catalogue, clusters/mutants.py)")] = None,
    plan: Annotated[list[str] | None, typer.Option(help="protocol, random, disk, corruption, idempotent, membership, "
                                                        "small-fetches, txn, txn-random, txn-coord, groups, "
                                                        "groups-random or groups-coord "
                                                        "(repeatable; default: each mutant's own, protocol and random "
                                                        "but txn/txn-random or groups/groups-random for the "
                                                        "coordinators')")] = None,
    seeds: Annotated[int, typer.Option(help="runs per mutant and plan (seeds 0..N-1 above --seed)")] = 1,
    seed: Annotated[int, typer.Option(help="the first seed")] = 22000,
    minutes: Annotated[float, typer.Option(help="minutes per run")] = 5.0,
    cluster: Annotated[str, typer.Option(help="local or docker (a mutant's code reaches the nodes on either)")
                       ] = "local",
    store: Annotated[str, typer.Option(help="where runs are stored (a measurement resumes from it)")] = "store",
    out: Annotated[Path, typer.Option(help="where the table goes")] = Path("docs/MUTATION.md"),
    notes: Annotated[Path | None, typer.Option(help="a Markdown file appended to the table")] = None,
    check_only: Annotated[bool, typer.Option(help="only check that every mutant applies exactly once to this "
                                                  "code and the mutated copy compiles; run nothing")] = False,
    unit_tests: Annotated[bool, typer.Option(help="run the broker's unit tests against each mutant (quick "
                                                  "cross-check) instead of clusters")] = False,
    render_only: Annotated[bool, typer.Option(help="only rewrite the table from the store and the ledger")] = False,
    reanalyze: Annotated[bool, typer.Option(help="first check every stored run of the chosen mutants again with "
                                                 "this tree's checkers (as `kafkaesque analyze`), then render")
                         ] = False,
    ledger: Annotated[Path | None, typer.Option(help="the record of every counted run's outcome (default: beside "
                                                     "--out, docs/MUTATION-runs.jsonl for the default table): the "
                                                     "table is rendered from it and the store, and a measurement "
                                                     "resumes from both")] = None,
    list_mutants: Annotated[bool, typer.Option("--list", help="list the catalogue and exit")] = False,
) -> None:
    """Run broker mutants under the protocol nemesis and random faults and write docs/MUTATION.md.

    Each mutant (clusters/mutants.py) breaks one protocol rule in one place; it is applied to a temporary
    copy of the code that the nodes run (never to this tree). Runs already in the store (same mutant,
    plan, seed, length and mutated code) are skipped, so the command resumes. Exit 3 on bad input or a
    catalogue that no longer applies.
    """
    import py_compile

    from kafkaesque_harness.clusters.mutants import MUTANTS
    from kafkaesque_harness.harness.mutate import measure, unit_test_mutant
    from kafkaesque_harness.studies.mutation import (
        PLANS,
        catalogue_problems,
        mutant_copy,
        select,
        write_mutation_doc,
    )

    if list_mutants:
        for m in MUTANTS:
            print(f"{m.name}\t{', '.join(m.files)}\t{m.rule}")
        return
    problems = catalogue_problems()
    if problems:
        fail_all(problems)
    try:
        chosen = select(mutant)
    except ValueError as e:
        fail(str(e))
    if check_only:
        for m in chosen:
            with mutant_copy(m) as copy:
                for f in m.files:
                    try:
                        py_compile.compile(str(copy.package / f), doraise=True)
                    except py_compile.PyCompileError as e:
                        fail(f"mutant {m.name}: the mutated {f} does not compile ({e.msg.strip()}); fix its "
                             "replacement in clusters/mutants.py.")
        err.print(f"mutate: all {len(chosen)} mutants apply exactly once and compile")
        return
    plans = plan or None  # none named: each mutant's own (default_plans: the coordinators' run their workloads)
    bad = [p for p in plans or () if p not in PLANS]
    if bad:
        fail(f"unknown plan {', '.join(bad)}; valid: {', '.join(PLANS)}.")
    if cluster not in ("local", "docker"):
        fail(f"--cluster {cluster!r}: a mutant's code reaches only our own nodes; use local or docker.")
    if minutes <= 0 or seeds < 1:
        fail("--minutes must be above 0 and --seeds at least 1.")
    note_text = ""
    if notes is not None:
        if not notes.is_file():
            fail(f"notes file {notes} does not exist; give a Markdown file, or leave --notes out.")
        note_text = notes.read_text()
    from kafkaesque_harness.results.store import command_as_shown

    command = command_as_shown(["kafkaesque", "mutate", *sys.argv[2:]])  # no path of this machine in the page

    # The ledger lives beside the table it renders: a table written elsewhere (a test's, a trial's) never
    # touches the committed one.
    ledger = ledger or out.with_name(f"{out.stem}-runs.jsonl")

    def render() -> None:
        write_mutation_doc(store, out, command, note_text, ledger=ledger)

    if reanalyze:
        from kafkaesque_harness.harness.mutate import reanalyze as recheck

        n = recheck(store, chosen, log=lambda m: err.print(m))
        err.print(f"mutate: {n} stored run(s) checked again")
        render_only = True
    if render_only:
        render()
        err.print(f"wrote {out}")
        return
    if unit_tests:
        for m in chosen:
            doc = unit_test_mutant(m, store)
            err.print(f"mutate: unit tests vs {m.name}: {'killed' if doc['killed'] else 'survived'} ({doc['summary']})")
        render()
        err.print(f"wrote {out}")
        return
    from kafkaesque_harness.results.store import StoreError

    try:
        ran, skipped = measure(chosen, plans, list(range(seed, seed + seeds)), minutes * 60, store, cluster,
                               log=lambda m: err.print(m), after_each=render, ledger=ledger)
    except StoreError as e:
        fail(str(e))
    render()
    err.print(f"mutate: {ran} run(s) made, {skipped} already in {store}; wrote {out}")
    print(out)


@app.command("sim-sweep")
def sim_sweep(
    row: Annotated[list[str] | None, typer.Option(help="a sweep row: the default broker or a flaw variant with the "
                                                       "workload that reaches it (repeatable; default: every row of "
                                                       "studies/simulation.py; --list names them)")] = None,
    seeds: Annotated[int, typer.Option(help="at most this many seeds per row")] = 1000,
    start_seed: Annotated[int, typer.Option(help="the row's first seed")] = 1,
    failures: Annotated[int, typer.Option(help="stop a row at this many failing seeds")] = 3,
    budget: Annotated[float, typer.Option(help="wall seconds per row (0: none); the seeds in flight finish")] = 0.0,
    workers: Annotated[int, typer.Option(help="worker processes (1 or 2)")] = 1,
    store: Annotated[str, typer.Option(help="where failing seeds' runs are kept (passing seeds' are removed)")
                     ] = "store",
    out: Annotated[Path, typer.Option(help="where the page goes")] = Path("docs/SIMULATION.md"),
    ledger: Annotated[Path | None, typer.Option(help="the record of every seed (default: beside --out, "
                                                     "docs/SIMULATION-runs.jsonl); the page is rendered from it "
                                                     "and a sweep resumes from it")] = None,
    detection: Annotated[Path, typer.Option(help="the real runs' page the variants are set beside")
                         ] = Path("docs/DETECTION.md"),
    notes: Annotated[Path | None, typer.Option(help="a Markdown file appended to the page")] = None,
    render_only: Annotated[bool, typer.Option(help="only rewrite the page from the ledger")] = False,
    list_rows: Annotated[bool, typer.Option("--list", help="list the rows and exit")] = False,
    fail_on_anomaly: Annotated[bool, typer.Option(help="exit 1 when a seed of this sweep (its rows, its seed range) "
                                                       "failed or the harness failed it, printing each one's replay "
                                                       "command (the nightly sweep of the default broker)")
                               ] = False,
) -> None:
    """Sweep seeds of the simulator per broker variant and write docs/SIMULATION.md (every figure simulated).

    Each seed is a whole `kafkaesque sim` run with the row's settings, in worker processes; each seed's verdict,
    anomalies, checkers and costs go into the ledger as it finishes, and the page is rendered from the ledger.
    """
    from kafkaesque_harness.harness.runner import EXIT_HARNESS
    from kafkaesque_harness.harness.sim_sweep import MAX_WORKERS, row_problems, sweep_row
    from kafkaesque_harness.results.store import command_as_shown
    from kafkaesque_harness.studies.simulation import ROWS, failed, select_rows, write_simulation_doc

    if list_rows:
        for r in ROWS.values():
            print(f"{r.name}\t{r.variant}\t{r.workload_label()}\t{','.join(r.nemesis)}")
        return
    try:
        chosen = select_rows(row)
    except ValueError as e:
        fail(str(e))
    if seeds < 1 or failures < 1 or not 1 <= workers <= MAX_WORKERS or budget < 0:
        fail(f"--seeds and --failures must be at least 1, --workers 1 to {MAX_WORKERS}, --budget 0 or more.")
    note_text = ""
    if notes is not None:
        if not notes.is_file():
            fail(f"notes file {notes} does not exist; give a Markdown file, or leave --notes out.")
        note_text = notes.read_text()
    ledger = ledger or out.with_name(f"{out.stem}-runs.jsonl")
    command = command_as_shown(["kafkaesque", "sim-sweep", *sys.argv[2:]])

    def render() -> None:
        write_simulation_doc(ledger, out, command, detection, note_text)

    if not render_only:
        problems = [p for r in chosen for p in row_problems(r)]
        if problems:
            fail_all(problems)
    bad: list[str] = []
    if not render_only:
        for r in chosen:
            records = sweep_row(r, start_seed, seeds, failures, store, ledger, workers=workers, budget_s=budget,
                                log=lambda m: err.print(m))
            bad += [f"{r.name} seed {rec['seed']}: {'harness error' if rec.get('exit') == EXIT_HARNESS else 'anomaly'} "
                    f"{', '.join(rec.get('anomalies') or []) or rec.get('error') or ''}; replay: "
                    f"{r.replay_command(rec['seed'])}" for rec in records
                    if start_seed <= rec["seed"] < start_seed + seeds and (failed(rec) or rec.get("exit") == EXIT_HARNESS)]
            render()
    render()
    err.print(f"wrote {out}")
    print(out)
    if fail_on_anomaly and bad:
        for line in bad:
            err.print(line, markup=False, highlight=False)
        raise typer.Exit(1)


def _print_campaign_plan(plan) -> None:
    t = Table("#", "run", "workload", "nemesis", "variant", "acks", "flush", "rep", "seed",
              title=f"campaign {plan.name}: {len(plan.runs)} runs of {plan.runs[0].spec.time_limit:g} s, "
                    f"budget {plan.budget:g} s, cluster {plan.cluster}")
    for p in plan.runs:
        s = p.spec
        t.add_row(str(p.index + 1), p.id, s.workload, ",".join(s.nemesis) or "none", s.broker.broker_variant, s.acks,
                  s.broker.flush_policy, str(p.repetition), str(s.seed))
    out = Console()
    if not out.is_terminal:
        out = Console(width=240)  # piped into a file or CI log: do not squeeze the columns
    out.print(t)


def main() -> None:
    """The guarded app, and a guard around it for what fails before a command runs (the console script,
    harness/entry.py, imports this module and calls it)."""
    from kafkaesque_harness.workloads.base import exit_without_finalizers

    try:
        app()
    except SystemExit as e:
        # parked group members (workloads/base.py close_confluent_consumer) must not be destroyed by the
        # interpreter's finalizers, which could freeze the process after its run was stored
        exit_without_finalizers(e.code if isinstance(e.code, int) else EXIT_HARNESS if e.code else 0)
        raise
    except Exception as e:  # noqa: BLE001 - e.g. building the commands; the group's guard covers the rest
        err.print(f"[red]error:[/] {escape(harness_failure(e))}")
        sys.exit(EXIT_HARNESS)
    exit_without_finalizers(0)


if __name__ == "__main__":
    main()
