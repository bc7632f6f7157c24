"""``distlab`` on the command line (lesson 00: ``doctor``; lesson 09: ``run``, ``check``, ``job``, ``bench``;
lesson 10: ``monitor``).

Exit codes: 0 done; 1 the training (or a benchmark) failed; 2 a bad command line or run config
(nothing was started); 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

EXAMPLE = """\
examples (configs/ holds one small, commented config per strategy):
  distlab check configs/data.yaml                 is this config valid? (prints it, defaults filled in)
  distlab run configs/data.yaml --set training.lr=0.05   train on this machine (torchrun or horovodrun)
  distlab run run.yaml --node-rank 1              this node's share of a multi-node run
  distlab job slurm run.yaml -o job.sbatch        a SLURM batch script for the same run
  distlab job azureml run.yaml -o job.yml         an Azure ML command job
  distlab job k8s run.yaml --set launch.image=REGISTRY/distlab:0.1 -o pytorchjob.yaml
  distlab job vertex run.yaml --set launch.image=REGISTRY/distlab:0.1 -o vertex_job.yaml
  distlab monitor runs/run                        follow a running job's ranks from another terminal
  distlab monitor runs/run --once                 one look at it: a line per rank, one for the job
  distlab doctor                                  what this machine has and which backends work
  distlab bench scaling                           run bench/scaling.py (prints its GOAL lines)
"""


def strategies_help() -> str:
    """Lesson 09: the strategies a config's ``parallel.strategy`` can name, from ``parallelize.registry``."""
    from .parallelize.registry import describe

    return "strategies (parallel.strategy):\n" + describe()


def build_parser() -> argparse.ArgumentParser:
    from .long_runs.monitor import STALL_SECONDS

    parser = argparse.ArgumentParser(prog="distlab", description="Distributed training you can run and watch.",
                                     epilog=EXAMPLE + "\n" + strategies_help(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def overrides(p):
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="change one setting, e.g. --set training.lr=0.05 (repeatable)")

    p = sub.add_parser("run", help="train as a run config says, on torchrun or horovodrun",
                       description="Train as CONFIG says: torchrun (or horovodrun) starts the ranks on this node; "
                                   "progress lines while they train, their results at the end.",
                       epilog=strategies_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="the run config (YAML or TOML)")
    overrides(p)
    p.add_argument("--node-rank", type=int, default=0, help="which node this is, 0 to launch.nodes-1 (default 0)")
    p.add_argument("--dry-run", action="store_true", help="print the launch command and stop")

    p = sub.add_parser("check", help="validate a run config and print it with every default filled in",
                       description="Check CONFIG as distlab.launch would before starting a rank (its fields, the "
                                   "strategy's own checks, what the strategy supports) and print it in full.",
                       epilog=strategies_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config")
    overrides(p)

    p = sub.add_parser("job", help="write a ready-to-submit cluster job for a run config",
                       description="Write a job file that runs CONFIG on a cluster: an Azure ML command job, a "
                                   "SLURM batch script, a Kubernetes PyTorchJob (Kubeflow) or a Vertex AI custom "
                                   "job. The container clouds (azureml, k8s, vertex) run launch.image: build it "
                                   "from docker/Dockerfile, push it, and set it in the config or with --set.")
    p.add_argument("target", help="azureml, slurm, k8s or vertex")
    p.add_argument("config")
    overrides(p)
    p.add_argument("-o", "--output", help="where to write it (default: print it)")
    p.add_argument("--machine-type", help="vertex: each node's machine (default: a3-highgpu-Ng for N GPUs, "
                                          "n1-standard-K for CPU ranks)")
    p.add_argument("--accelerator-type", help="vertex: the GPU kind, e.g. NVIDIA_H200_141GB (default NVIDIA_H100_80GB)")

    p = sub.add_parser("monitor", help="follow a job from its run folder: each rank's step, loss, speed",
                       description="Read the metrics files the ranks of a job append to (metrics_<rank>.jsonl in "
                                   "RUN_DIR) and print a line per rank and one for the job, about once a second, "
                                   "until the job finishes (exit 0) or fails (exit 1); a stalled job is watched on "
                                   "(Ctrl-C: exit 130).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's folder (a run config's logging.dir/logging.name)")
    p.add_argument("--once", action="store_true", help="print one snapshot and stop (exit 0)")
    p.add_argument("--stall-seconds", type=float, default=STALL_SECONDS,
                   help=f"a running rank silent this long is called stalled (default {STALL_SECONDS:g})")
    p.add_argument("--wait", type=float, default=10.0,
                   help="seconds to wait for the folder and its first metrics (default 10)")

    p = sub.add_parser("doctor", help="what this machine has and which backends work")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("bench", help="run one of the benchmarks in bench/ (list them with no name)")
    p.add_argument("name", nargs="?", help="e.g. scaling, collectives, memory")
    p.add_argument("args", nargs=argparse.REMAINDER, help="passed to the benchmark")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .cluster.config import ConfigError

    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        print(f"distlab {args.command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"distlab {args.command}: interrupted", file=sys.stderr)
        return 130


def _load(args):
    from .cluster.config import load

    return load(args.config, args.overrides)


def cmd_run(args) -> int:
    from .cluster import run

    config = _load(args)
    config.check_call()                 # what launch checks, before torchrun starts anything
    if args.dry_run:
        cmd, env = run.command(config, args.node_rank)
        print(" ".join(f"{k}={v}" for k, v in env.items()), *cmd)
        return 0
    return run.run(config, node_rank=args.node_rank)


def cmd_check(args) -> int:
    import yaml

    config = _load(args)
    config.check_call()
    print(f"# {args.config}: valid; {config.launch.world_size} ranks ({config.launch.nodes} node(s) x "
          f"{config.launch.processes_per_node}), strategy {config.parallel.strategy}")
    print(yaml.safe_dump(config.model_dump(), sort_keys=False), end="")
    return 0


def cmd_job(args) -> int:
    from .cluster import job_files
    from .cluster.config import ConfigError

    if args.target not in job_files.TARGETS:
        raise ConfigError(f"no job target {args.target!r}: choose one of {', '.join(job_files.TARGETS)}")
    config = _load(args)
    # the job runs from the folder it is submitted from: name the config relative to it
    relative = os.path.relpath(args.config)
    config_file = relative if not relative.startswith("..") else os.path.basename(args.config)
    machine = {"machine_type": args.machine_type, "accelerator_type": args.accelerator_type}
    if args.target == "vertex":
        text = job_files.vertex(config, config_file=config_file, **machine)
    elif any(machine.values()):
        raise ConfigError(f"--machine-type and --accelerator-type are Vertex AI's (distlab job vertex); "
                          f"a {args.target} job's machines are chosen by its cluster")
    else:
        text = job_files.TARGETS[args.target](config, config_file=config_file)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"distlab job: wrote {args.output} ({args.target}); submit it with: "
              f"{job_files.SUBMIT[args.target].format(path=args.output, name=config.logging.name)}")
    else:
        print(text, end="")
    return 0


def cmd_monitor(args) -> int:
    import time

    from .cluster.config import ConfigError
    from .long_runs.monitor import RunMonitor, describe

    monitor = RunMonitor(args.run_dir, stall_seconds=args.stall_seconds)
    deadline = time.time() + args.wait
    while not monitor.poll() and not monitor.status().ranks:     # a job just started: give it --wait s
        if time.time() > deadline:
            what = "holds no metrics_<rank>.jsonl" if os.path.isdir(args.run_dir) else "does not exist"
            raise ConfigError(f"{args.run_dir} {what} after {args.wait:g} s: is it a run's folder "
                              "(logging.dir/logging.name), and has the job started?")
        time.sleep(0.2)
    while True:
        status = monitor.status()
        print(describe(status), flush=True)
        if args.once:                 # a look, not a verdict
            return 0
        if status.over:
            return 1 if status.state == "failed" else 0
        time.sleep(1.0)
        monitor.poll()


def cmd_doctor(args) -> int:
    from .doctor import format_report, report

    rep = report()
    print(json.dumps(rep, indent=2) if args.json else format_report(rep))
    return 0


def bench_dir() -> str:
    """The repository's bench/ folder (benchmarks are not part of the installed package)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def cmd_bench(args) -> int:
    from .cluster.config import ConfigError

    folder = bench_dir()
    if not os.path.isdir(folder):
        raise ConfigError(f"no bench/ folder next to this distlab ({folder}): benchmarks need the repository")
    names = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py"))
    if not args.name:
        print("benchmarks: " + ", ".join(names))
        return 0
    if args.name not in names:
        raise ConfigError(f"no benchmark {args.name!r}; there are: {', '.join(names)}")
    code = subprocess.call([sys.executable, os.path.join(folder, f"{args.name}.py"), *args.args])
    return 0 if code == 0 else 1


COMMANDS = {"run": cmd_run, "check": cmd_check, "job": cmd_job, "monitor": cmd_monitor, "doctor": cmd_doctor,
            "bench": cmd_bench}


if __name__ == "__main__":
    sys.exit(main())
