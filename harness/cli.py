"""`kafkaesque`: run a test, re-check a stored one, list runs, clean up after crashes, check any history."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from harness.cluster_cli import cluster_app, image_app
from results.pipeline.cli import pipeline_app

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Kafkaesque: a Jepsen-style fault-injection harness for Kafka-style replicated logs.")
err = Console(stderr=True, soft_wrap=True)  # one message, one line: easy to grep in CI logs
app.add_typer(image_app, name="image")
app.add_typer(cluster_app, name="cluster")
app.add_typer(pipeline_app, name="pipeline")


def _fail(message: str, code: int = 3) -> None:
    from rich.markup import escape

    err.print(f"[red]error:[/] {escape(message)}")  # messages name TOML tables: [paths], [[nodes]]
    raise typer.Exit(code)


@app.command()
def run(
    workload: Annotated[str, typer.Option(help="workload name (queue)")] = "queue",
    nemesis: Annotated[str, typer.Option(help="comma list of faults: kill, pause, partition, lossy-crash, clock, "
                                            "clock-jump, clock-strobe, net, disk, drop-caches, controller, membership; or protocol, "
                                            "or scenario:NAME, alone")] = "",
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
                                             "clusters/external.py), or ssh:FILE.toml (our broker over SSH, "
                                             "clusters/ssh.py)")] = "auto",
    flush_policy: Annotated[str, typer.Option(help="every-write, every-N-records:N, every-ms:N, never")] = "never",
    broker_variant: Annotated[str, typer.Option(help="default, or a historic flaw of the reference broker to switch "
                                                     "on: truncate-to-hw, no-elr, unclean-election, no-epoch-fencing")
                              ] = "default",
    unclean_recovery_strategy: Annotated[str, typer.Option(help="the controller's unclean.recovery.strategy: "
                                                                "balanced, proactive or manual")] = "balanced",
    seed: Annotated[int, typer.Option()] = 0,
    store: Annotated[str, typer.Option(help="where runs are stored")] = "store",
    name: Annotated[str, typer.Option(help="test name (store folder); default: the workload")] = "",
    leave_running: Annotated[bool, typer.Option(help="keep the cluster up after the run")] = False,
    recovery_wait: Annotated[float, typer.Option(help="seconds to let the cluster recover after healing")] = 10.0,
    no_panel: Annotated[bool, typer.Option(help="no live panel (the default when not on a terminal)")] = False,
    elle: Annotated[bool, typer.Option(help="also check the history with the Elle-style cycle checker")] = False,
) -> None:
    """Run one test: cluster up, workload + faults, heal, final reads, check, store. Prints the run dir last."""
    from harness.runner import HarnessError, cluster_problem, run_test
    from harness.spec import TestSpec
    from nemesis.registry import nemesis_problem
    from results.store import StoreError
    from workloads.registry import WORKLOAD_NAMES

    if workload not in WORKLOAD_NAMES:
        _fail(f"unknown workload {workload!r}; valid: {', '.join(WORKLOAD_NAMES)}.")
    faults = [n.strip() for n in nemesis.split(",") if n.strip()]
    problem = nemesis_problem(faults)
    if problem:
        _fail(problem + ".")
    from nemesis.faults import PARTITION_TARGETS
    from nemesis.targets import TARGETS

    valid_targets = list(dict.fromkeys(TARGETS + PARTITION_TARGETS))
    if nemesis_target not in valid_targets:
        _fail(f"unknown --nemesis-target {nemesis_target!r}; valid: {', '.join(valid_targets)}.")
    from harness.generator import NEMESIS_SCHEDULES

    if nemesis_schedule not in NEMESIS_SCHEDULES:
        _fail(f"unknown --nemesis-schedule {nemesis_schedule!r}; valid: {', '.join(NEMESIS_SCHEDULES)}.")
    if controllers < 1 or controllers % 2 == 0:
        _fail(f"--controllers {controllers} is not an odd number of at least 1; a Raft quorum needs 1, 3 or 5.")
    if controllers > 1 and cluster not in ("auto", "local", "docker"):
        _fail(f"--controllers {controllers} needs our own cluster (--cluster local or docker); a cluster file "
              "lists its controllers itself.")
    cluster_error = cluster_problem(cluster)
    if cluster_error:
        _fail(cluster_error + ".")
    if cluster.startswith("ssh:"):
        from clusters.ssh import load_node_file

        # The node file decides how many brokers there are; --brokers would only contradict it.
        brokers = sum(1 for n in load_node_file(cluster[len("ssh:"):]) if n.name.startswith("broker-"))
    from clusters.external import cluster_file_brokers, is_cluster_file

    if is_cluster_file(cluster):
        brokers = cluster_file_brokers(cluster)  # the file decides, as a node file does
    from clusters.broker.controller import UNCLEAN_RECOVERY_STRATEGIES
    from clusters.reference import BROKER_VARIANTS

    if broker_variant not in BROKER_VARIANTS:
        _fail(f"unknown --broker-variant {broker_variant!r}; valid: {', '.join(BROKER_VARIANTS)}.")
    if unclean_recovery_strategy not in UNCLEAN_RECOVERY_STRATEGIES:
        _fail(f"unknown --unclean-recovery-strategy {unclean_recovery_strategy!r}; "
              f"valid: {', '.join(UNCLEAN_RECOVERY_STRATEGIES)}.")
    if acks not in ("all", "1", "0", "-1"):
        _fail(f"--acks {acks!r} is not one of all, 1, 0.")
    if client not in ("kafka-python", "confluent-kafka"):
        _fail(f"--client {client!r} is not one of kafka-python, confluent-kafka.")
    if not 1 <= min_isr <= replication_factor <= brokers:
        where = (f"the brokers of {cluster.removeprefix('ssh:')}" if cluster.endswith(".toml") else "--brokers")
        _fail(f"need 1 <= --min-isr ({min_isr}) <= --replication-factor ({replication_factor}) <= {where} ({brokers}).")
    spec = TestSpec(name=name or workload, workload=workload, nemesis=faults, nemesis_interval=nemesis_interval,
                    nemesis_schedule=nemesis_schedule,
                    nemesis_target=nemesis_target, time_limit=time_limit, concurrency=concurrency, rate=rate,
                    brokers=brokers, controllers=controllers, replication_factor=replication_factor, min_isr=min_isr, partitions=partitions,
                    acks=acks, client=client, cluster=cluster, flush_policy=flush_policy,
                    broker_variant=broker_variant, unclean_recovery_strategy=unclean_recovery_strategy,
                    seed=seed, store=store, leave_running=leave_running,
                    recovery_wait=recovery_wait, elle=elle)
    try:
        code, run_dir = run_test(spec, log=lambda m: err.print(m), panel=not no_panel and sys.stderr.isatty())
    except StoreError as e:
        _fail(str(e))
    except HarnessError as e:
        _fail(str(e))
    _print_verdict(run_dir)
    print(run_dir)
    raise typer.Exit(code)


def _print_verdict(run_dir: Path) -> None:
    try:
        res = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        err.print("[red]no results were written[/]")
        return
    v = res.get("valid")
    colour = {True: "green", False: "red"}.get(v, "yellow")
    err.print(f"[bold {colour}]valid: {v}[/]")
    for reason in ("error", "interrupted", "final_reads"):
        if res.get(reason):
            err.print(f"  {reason}: {res[reason]}")
    for cname, c in (res.get("checkers") or {}).items():
        for a in c.get("anomalies", []):
            err.print(f"  [red]{cname}: {a['name']} x{a['count']}[/]")
            for ex in a.get("examples", [])[:3]:
                if ex.get("summary"):
                    err.print(f"    - {ex['summary']}")
    err.print(f"  report: {run_dir / 'report.html'}")


@app.command()
def analyze(run_dir: Annotated[Path, typer.Argument(help="a stored run directory")]) -> None:
    """Re-check a stored run's history offline; rewrites results.json (identically) and prints the verdict."""
    from harness.history import HistoryFormatError, read_history
    from harness.runner import analyze_history, exit_code
    from results.store import write_json

    if not (run_dir / "test.json").exists() or not (run_dir / "history.jsonl").exists():
        _fail(f"{run_dir} is not a run directory (it needs test.json and history.jsonl); see `kafkaesque ls`.")
    test = json.loads((run_dir / "test.json").read_text())
    test["run_dir"] = str(run_dir)  # where the node state dumps are now, wherever the store moved
    try:
        history = read_history(run_dir / "history.jsonl")
    except HistoryFormatError as e:
        _fail(str(e))
    results = analyze_history(test, history)
    old = run_dir / "results.json"
    if old.exists():
        previous = json.loads(old.read_text())
        for key in ("error", "interrupted", "final_reads", "harness_warnings", "faults_not_run"):
            if key in previous:
                results[key] = previous[key]
                if key in ("error", "interrupted", "final_reads") and results["valid"] is True:
                    results["valid"] = "unknown"
    write_json(old, results)
    _print_verdict(run_dir)
    print(run_dir)
    raise typer.Exit(exit_code(results["valid"]))


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="a stored run directory")]) -> None:
    """(Re)write a run's self-contained HTML report and print its path."""
    from results.report import render_report

    if not (run_dir / "test.json").exists():
        _fail(f"{run_dir} is not a run directory (it needs test.json); see `kafkaesque ls`.")
    print(render_report(run_dir))


@app.command("ls")
def list_runs(store: Annotated[str, typer.Option(help="where runs are stored")] = "store") -> None:
    """Runs in the store with their verdicts, newest first."""
    from results.store import list_runs as runs_in

    runs = runs_in(store)
    if not runs:
        err.print(f"no runs in {store}")
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
def cleanup() -> None:
    """Heal and remove everything a crashed run may have left: processes (paused ones too), containers, networks,
    and the faults and brokers on the nodes of SSH clusters whose harness died."""
    from clusters.docker import cleanup_docker
    from clusters.local import cleanup_leftovers
    from clusters.netns import cleanup_netns
    from clusters.ssh import cleanup_ssh

    killed = cleanup_leftovers() + cleanup_netns() + cleanup_docker() + cleanup_ssh()
    for k in killed:
        err.print(f"removed {k}")
    err.print(f"cleanup: {len(killed)} leftover(s) removed" if killed else "cleanup: nothing left behind")


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="a history file")],
    format: Annotated[str, typer.Option(help="jsonl, edn, porcupine-etcd, porcupine-kv")] = "jsonl",
    model: Annotated[str, typer.Option(help="queue, register, cas-register, etcd, kv, log (default: from the format)")] = "",
    time_limit: Annotated[float, typer.Option(help="checker budget in seconds")] = 60.0,
) -> None:
    """Check any history file and print the verdict; exit 0 valid, 1 invalid, 2 unknown."""
    try:
        from harness.check_cli import check_command
    except ImportError:
        _fail("the history checker command is not available in this build.")
    raise typer.Exit(check_command(str(file), format, model or None, time_limit))


@app.command()
def campaign(
    file: Annotated[Path, typer.Argument(help="a campaign TOML file (see campaigns/nightly.toml)")],
    dry_run: Annotated[bool, typer.Option(help="print the expanded matrix and run nothing")] = False,
    cluster: Annotated[str, typer.Option(help="auto, docker or local (default: the file's, else auto)")] = "",
    store: Annotated[str, typer.Option(help="where runs and campaign directories are stored")] = "store",
    no_panel: Annotated[bool, typer.Option(help="no live panel (the default when not on a terminal)")] = False,
) -> None:
    """Run a matrix of tests one after another within a time budget; write campaign.json, junit.xml, index.html.

    Exit 0 all valid, 1 any invalid, 2 any unknown and none invalid, 3 bad input. Prints the campaign dir last.
    """
    from harness.campaign import resolve_cluster, run_campaign
    from harness.campaign_file import CampaignFileError, load_campaign
    from results.store import StoreError

    try:
        plan = load_campaign(file, store=store, cluster=cluster or None)
    except CampaignFileError as e:
        _fail(f"{file}: {e}")
    if dry_run:
        _print_campaign_plan(plan)
        return
    resolve_cluster(plan)
    err.print(f"campaign {plan.name}: {len(plan.runs)} runs on the {plan.cluster} cluster, "
              f"budget {plan.budget:.0f} s")
    try:
        code, campaign_dir = run_campaign(plan, log=lambda m: err.print(m), panel=not no_panel and sys.stderr.isatty())
    except StoreError as e:
        _fail(str(e))
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
) -> None:
    """Run every fault plan against every broker variant (campaigns) and write the detection table.

    Each campaign file sets plans (scenarios, the protocol nemesis, plain random faults), variants,
    acks and flush settings, repetitions and budget; the table (docs/DETECTION.md by default) merges
    them and says per row how many runs found an anomaly, which, and how fast, above the three
    claims it exists for, computed from the rows.
    """
    from results.detection import write_detection

    command = "kafkaesque detect " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "kafkaesque detect"
    dirs = list(from_campaign or [])
    for d in dirs:
        if not (d / "campaign.json").exists():
            _fail(f"{d} holds no campaign.json; give a directory under <store>/campaigns/.")
    if notes is not None and not notes.is_file():
        _fail(f"notes file {notes} does not exist; give a Markdown file, or leave --notes out.")
    note_text = notes.read_text() if notes is not None else ""
    if not files and dirs:
        err.print(f"wrote {write_detection(dirs, out, command, note_text)}")
        return
    files = files or sorted(DETECTION_DIR.glob("*.toml"))
    if not files:
        _fail(f"no campaign files given and none in {DETECTION_DIR}; pass the campaign TOML files to run.")
    from harness.campaign import resolve_cluster, run_campaign
    from harness.campaign_file import CampaignFileError, load_campaign
    from results.store import StoreError

    plans = []
    for file in files:  # every file is read and checked before the first run starts
        try:
            plans.append(load_campaign(file, store=store, cluster=cluster or None))
        except CampaignFileError as e:
            _fail(f"{file}: {e}")
    for plan in plans:
        resolve_cluster(plan)
        err.print(f"detect: campaign {plan.name}, {len(plan.runs)} runs on the {plan.cluster} cluster, "
                  f"budget {plan.budget:.0f} s")
        try:
            _, campaign_dir = run_campaign(plan, log=lambda m: err.print(m))
        except StoreError as e:
            _fail(str(e))
        dirs.append(campaign_dir)
        # Rewritten after every campaign: a long detection run leaves a table at each step.
        err.print(f"wrote {write_detection(dirs, out, command, note_text)} (campaign {campaign_dir})")
    print(out)


def _print_campaign_plan(plan) -> None:
    t = Table("#", "run", "workload", "nemesis", "variant", "acks", "flush", "rep", "seed",
              title=f"campaign {plan.name}: {len(plan.runs)} runs of {plan.runs[0].spec.time_limit:g} s, "
                    f"budget {plan.budget:g} s, cluster {plan.cluster}")
    for p in plan.runs:
        s = p.spec
        t.add_row(str(p.index + 1), p.id, s.workload, ",".join(s.nemesis) or "none", s.broker_variant, s.acks,
                  s.flush_policy, str(p.repetition), str(s.seed))
    out = Console()
    if not out.is_terminal:
        out = Console(width=240)  # piped into a file or CI log: do not squeeze the columns
    out.print(t)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
