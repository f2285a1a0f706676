"""Benchmarks: is a run bound by the endpoint, not by the plugin? Prints a Markdown table.

    python benchmarks/run.py [--repeats 3] [--only judge|fetch|xdist|warm|scale] [--data-dir ../shared/datasets]

Everything talks to `orbench mock-server` in its own process on loopback, with injected latency.
Times are wall-clock seconds of whole commands (process start, imports and all), the median of
--repeats runs with min-max; compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FILES = ("or-bench-hard-1k.csv", "or-bench-toxic.csv")


@contextmanager
def mock_server(*args: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen([sys.executable, "-m", "pytest_orbench.tools.cli", "mock-server", "--port", "0",
                                 "--port-file", str(port_file), *args], stdout=subprocess.DEVNULL)
        try:
            for _ in range(200):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port_file.read_text()}/v1"
        finally:
            proc.terminate()
            proc.wait()


def server_stats(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url.rsplit("/v1", 1)[0] + "/stats") as resp:
        data: dict[str, object] = json.load(resp)
    return data


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    elapsed, _, out = timed_cpu(cmd, cwd, env)
    return elapsed, out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_cpu(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the command's process tree: pytest, its xdist workers and
    its fetch processes, every one waited for; not the simulator, a process of its own) and the output."""
    cpu = _children_cpu()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"timed out after 600 s: {' '.join(cmd)}\n{(exc.stdout or b'')[-2000:]!r}") from None
    elapsed = time.perf_counter() - start
    cpu = _children_cpu() - cpu
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd[:6])}... exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed, cpu, proc.stdout


class Rows(list[str]):
    """Table rows, each also written to stderr as soon as it is measured (a long run shows its progress)."""

    def append(self, row: str) -> None:
        print(row, file=sys.stderr, flush=True)
        super().append(row)

    def extend(self, rows: Iterable[str]) -> None:
        for row in rows:
            self.append(row)


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def plugin_cmd(url: str, store: Path, concurrency: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "--orbench", "--orbench-model=openai/orbench-mock", f"--orbench-api-base={url}",
            f"--orbench-store={store}", f"--orbench-concurrency={concurrency}", "-q", "-p", "no:cacheprovider",
            "-p", "no:randomly", *extra, "."]


def bare_pytest(n: int, work: Path, env: dict[str, str], *extra: str) -> float:
    return bare_pytest_cpu(n, work, env, *extra)[0]


def bare_pytest_cpu(n: int, work: Path, env: dict[str, str], *extra: str) -> tuple[float, float]:
    """Wall and CPU seconds of bare pytest on n trivial tests."""
    folder = work / f"bare{n}"
    folder.mkdir(exist_ok=True)
    (folder / "test_bare.py").write_text(
        f"import pytest\n\n@pytest.mark.parametrize('i', range({n}))\ndef test_trivial(i):\n    assert i >= 0\n")
    elapsed, cpu, _ = timed_cpu([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                                 *extra, "."], folder, env)
    return elapsed, cpu


def xdist_rows(n: int, repeats: int, work: Path, runs: Path, env: dict[str, str]) -> list[str]:
    """-n 2 against -n 0 at the same (session-wide) concurrency, and xdist's own cost beside them: bare pytest
    -n 2 against -n 0 on as many trivial tests (two more interpreters, each collecting, six messages per test).
    All four interleaved in each repeat, so a busy machine weighs on them alike; wall and CPU seconds (the CPU of
    the process tree: on a shared machine wall time follows the load, CPU time much less)."""
    rows = []
    floor: dict[str, list[tuple[float, float]]] = {"0": [], "2": []}
    for latency, concurrency in ((0.25, 32), (0.05, 64)):
        serial, parallel, duplicates = [], [], 0
        for repeat in range(repeats):
            with mock_server("--latency", str(latency)) as url:
                serial.append(timed_cpu(plugin_cmd(url, work / f"x0-{latency}-{repeat}", concurrency), runs, env)[:2])
            with mock_server("--latency", str(latency)) as url:
                parallel.append(timed_cpu(plugin_cmd(url, work / f"x2-{latency}-{repeat}", concurrency, "-n", "2"),
                                          runs, env)[:2])
                duplicates += int(server_stats(url)["duplicates"])  # type: ignore[call-overload]
            floor["0"].append(bare_pytest_cpu(n, work, env))
            floor["2"].append(bare_pytest_cpu(n, work, env, "-n", "2"))
        rows.append(f"| xdist: -n 2 vs -n 0, L={latency}s, C={concurrency} for the session ({duplicates} duplicate calls); "
                    f"CPU s {_cpu(parallel)} vs {_cpu(serial)} | {summary([w for w, _ in parallel])} | "
                    f"{summary([w for w, _ in serial])} | +{_median_gap(parallel, serial):.2f}s "
                    f"(CPU +{_median_gap(parallel, serial, 1):.2f}s) | <= floor + 0.3 s, no duplicates |")
    rows.append(f"| xdist floor: bare pytest -n 2 vs -n 0, {n} trivial tests, beside the rows above; CPU s {_cpu(floor['2'])} "
                f"vs {_cpu(floor['0'])} | {summary([w for w, _ in floor['2']])} | {summary([w for w, _ in floor['0']])} | "
                f"+{_median_gap(floor['2'], floor['0']):.2f}s (CPU +{_median_gap(floor['2'], floor['0'], 1):.2f}s) | "
                "(xdist's own start) |")
    return rows


def _cpu(runs: list[tuple[float, float]]) -> str:
    return f"{statistics.median(cpu for _, cpu in runs):.2f}"


def _median_gap(a: list[tuple[float, float]], b: list[tuple[float, float]], field: int = 0) -> float:
    return statistics.median(x[field] for x in a) - statistics.median(x[field] for x in b)


JUDGE_SPEED = """
import csv, json, os, statistics, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
start = time.perf_counter()
from pytest_orbench.judging.registry import make_judge
judge = make_judge(sys.argv[1])
judge.decide("q", "warm up")
load = time.perf_counter() - start
rows = []
for path in sys.argv[4:]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows += [(r["prompt"], r.get("response") or r.get("completion") or "") for r in csv.DictReader(fh)]
rows = [(p, r) for p, r in rows if len(r) >= int(sys.argv[3])]
rates = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    for prompt, reply in rows:
        judge.decide(prompt, reply)
    rates.append(len(rows) / (time.perf_counter() - t))
chars = statistics.median(len(r) for _, r in rows)
print(json.dumps({"rows": len(rows), "median_chars": chars, "load_s": load, "rates": rates}))
"""


def judge_speed(repeats: int, env: dict[str, str]) -> list[str]:
    """Offline judges: replies judged per second on one core (the keyword judge must do >= 2,000/s)."""
    dev = REPO.parent / "shared" / "judge-data" / "refusal-dev.csv"
    files = [dev] if dev.is_file() else sorted((REPO / "tests" / "data").glob("judge-*.csv"))
    what = "refusal-dev.csv (real replies)" if dev.is_file() else "tests/data (hand-written replies)"
    rows = []
    for name, shortest in (("keyword", 0), ("keyword", 1500), ("prefix", 0)):
        if shortest and not dev.is_file():
            continue  # the hand-written replies are all short
        out = subprocess.run([sys.executable, "-c", JUDGE_SPEED, name, str(repeats), str(shortest), *map(str, files)],
                             env=env, capture_output=True, text=True, timeout=600, check=True).stdout
        result = json.loads(out)
        rates = result["rates"]
        which = f"the {result['rows']:,} replies over {shortest:,} chars" if shortest else f"{result['rows']:,} replies"
        target = "reference" if name == "prefix" else ">= 2,000/s" if not shortest else "(long replies: cost grows with length)"
        rows.append(f"| judge {name}: {which} of {what}, median {result['median_chars']:.0f} chars, one core "
                    f"(load {result['load_s']:.2f}s) | {statistics.median(rates):,.0f}/s ({min(rates):,.0f}-{max(rates):,.0f}) "
                    f"| | | {target} |")
    return rows


def first_request(url: str, started: float) -> float | None:
    at = server_stats(url).get("first_request_at")
    return float(at) - started if isinstance(at, (int, float)) else None


def fetch_pairs(n: int, latency: float, concurrency: int, repeats: int, work: Path, runs: Path, data_dir: Path,
                env: dict[str, str]) -> str:
    """Plugin (-n 0, cold store) and the bare client, interleaved, each a whole process on a fresh
    simulator; wall seconds and seconds to the first request, median (min-max)."""
    plugin, bare, plugin_first, bare_first = [], [], [], []
    for repeat in range(repeats):
        with mock_server("--latency", str(latency)) as url:
            started = time.time()
            plugin.append(timed(plugin_cmd(url, work / f"store-{latency}-{concurrency}-{repeat}", concurrency), runs, env)[0])
            plugin_first.append(first_request(url, started) or float("nan"))
            served = server_stats(url)
            # One call per prompt at scale (the test suite proves the exact counts on a sample of 200).
            assert served["completions"] == n and served["duplicates"] == 0, served
        with mock_server("--latency", str(latency)) as url:
            started = time.time()
            bare.append(timed([sys.executable, str(HERE / "bare_client.py"), url, str(concurrency),
                               *(str(data_dir / f) for f in FILES)], work, env)[0])
            bare_first.append(first_request(url, started) or float("nan"))
    p, b = statistics.median(plugin), statistics.median(bare)
    target = {(0.25, 32): "<= 0.95x bare", (0.05, 64): "<= 1.00x bare"}.get((latency, concurrency), "")
    return (f"| cold, {n} prompts, L={latency}s, C={concurrency}: plugin -n 0 vs bare litellm+asyncio (whole processes; "
            f"first request after {statistics.median(plugin_first):.2f}s vs {statistics.median(bare_first):.2f}s) | "
            f"{summary(plugin)} | {summary(bare)} | {p / b:.2f}x | {target} |")


class PeakRss:
    """Peak resident memory (VmHWM) of every process under a root pid, and of other pids named, sampled from /proc
    every 0.2 s while a command runs: pytest's controller, its fetch processes (pytest_orbench.fetch.child and
    their forks), and the simulator."""

    def __init__(self, others: dict[str, int]) -> None:
        import threading

        self.others = others
        self.peaks: dict[int, tuple[str, float]] = {}  # pid -> (role, MiB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self.root: int | None = None

    @staticmethod
    def _status(pid: int) -> tuple[int, float] | None:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        try:
            return int(fields["PPid"].strip()), int(fields.get("VmHWM", "0 kB").split()[0]) / 1024
        except (KeyError, ValueError):
            return None

    def _role(self, pid: int) -> str:
        if pid == self.root:
            return "pytest"
        for role, other in self.others.items():
            if pid == other:
                return role
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return "other"
        return "fetch" if "fetchproc" in cmd else "pytest worker" if "xdist" in cmd or "execnet" in cmd else "child"

    def _sample(self) -> None:
        parents: dict[int, int] = {}
        memory: dict[int, float] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                status = self._status(int(entry.name))
                if status is not None:
                    parents[int(entry.name)], memory[int(entry.name)] = status
        tree = {self.root} if self.root is not None else set()
        grew = True
        while grew:
            found = {pid for pid, parent in parents.items() if parent in tree} - tree
            tree |= found
            grew = bool(found)
        for pid in tree | set(self.others.values()):
            if pid in memory:
                role = self.peaks.get(pid, (self._role(pid), 0.0))[0]
                self.peaks[pid] = (role, max(memory[pid], self.peaks.get(pid, (role, 0.0))[1]))

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def run(self, cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.root = proc.pid
        self._thread.start()
        out, _ = proc.communicate(timeout=3600)
        elapsed = time.perf_counter() - start
        self._stop.set()
        self._thread.join()
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"{' '.join(cmd[:6])}... exited {proc.returncode}:\n{out[-3000:]}")
        return elapsed, out

    def by_role(self) -> dict[str, float]:
        roles: dict[str, float] = {}
        for role, mib in self.peaks.values():
            roles[role] = max(roles.get(role, 0.0), mib)
        return roles


def synthetic_dataset(path: Path, n: int, data_dir: Path) -> None:
    """n distinct prompts in OR-Bench's words: the hard-1k prompts, each with a variant number once they repeat."""
    with (data_dir / "or-bench-hard-1k.csv").open(encoding="utf-8", newline="") as fh:
        seeds = [(r["prompt"], r["category"]) for r in csv.DictReader(fh)]
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["prompt", "category"])
        for i in range(n):
            prompt, category = seeds[i % len(seeds)]
            writer.writerow([prompt if i < len(seeds) else f"{prompt} (variant {i // len(seeds)})", category])


def scale_rows(sizes: list[int], repeats: int, work: Path, runs: Path, data_dir: Path, env: dict[str, str]) -> list[str]:
    """Cold runs of `sizes` prompts against the simulator (L = 0.01 s, C = 64): wall time per prompt, peak RSS of
    every process, the store and the results files; then a warm re-run of the largest against bare pytest."""
    rows = ["| prompts | wall s | ms per prompt | vs smallest | pytest peak RSS MiB | fetch processes MiB | "
            "simulator MiB | pytest KiB per added prompt | store MB | results JSON MB | prompts JSONL MB |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    per_prompt: dict[int, float] = {}
    first_rss: float | None = None
    with socket.socket() as sock:  # one port for every run: the api_base is part of each reply's store key, and
        sock.bind(("127.0.0.1", 0))  # the warm re-run must find the cold run's replies
        port = int(sock.getsockname()[1])
    for n in sizes:
        dataset = work / f"scale-{n}.csv"
        synthetic_dataset(dataset, n, data_dir)
        walls, peaks, sims, fetches = [], [], [], []
        store = work / f"store-scale-{n}"
        for repeat in range(repeats):
            store = work / f"store-scale-{n}-{repeat}"
            with tempfile.TemporaryDirectory() as tmp:
                port_file = Path(tmp) / "port"
                sim = subprocess.Popen([sys.executable, "-m", "pytest_orbench.tools.cli", "mock-server", "--port", str(port),
                                        "--port-file", str(port_file), "--latency", "0.01"], stdout=subprocess.DEVNULL)
                try:
                    for _ in range(200):
                        if port_file.exists() and port_file.read_text():
                            break
                        time.sleep(0.05)
                    url = f"http://127.0.0.1:{port_file.read_text()}/v1"
                    sampler = PeakRss({"simulator": sim.pid})
                    elapsed, out = sampler.run(plugin_cmd(url, store, 64, f"--orbench-datasets={dataset}:answer",
                                                          f"--orbench-json={work / f'scale-{n}.json'}"), runs, env)
                    assert server_stats(url)["completions"] == n, out[-2000:]
                finally:
                    sim.terminate()
                    sim.wait()
            roles = sampler.by_role()
            walls.append(elapsed)
            peaks.append(roles.get("pytest", 0.0))
            sims.append(roles.get("simulator", 0.0))
            fetches.append(roles.get("fetch", 0.0))
        wall = statistics.median(walls)
        first_rss = max(peaks) if first_rss is None else first_rss
        added = f"{1024 * (max(peaks) - first_rss) / (n - sizes[0]):.2f}" if n > sizes[0] else ""
        per_prompt[n] = 1000 * wall / n
        json_path = work / f"scale-{n}.json"
        lines_path = work / f"scale-{n}.prompts.jsonl"
        store_size = sum(f.stat().st_size for f in store.iterdir() if f.is_file()) / 1e6
        rows.append(f"| {n:,} | {summary(walls)} | {per_prompt[n]:.2f} | {per_prompt[n] / per_prompt[sizes[0]]:.2f}x | "
                    f"{max(peaks):.0f} | {max(fetches):.0f} | {max(sims):.0f} | {added} | "
                    f"{store_size:.1f} | {json_path.stat().st_size / 1e6:.2f} | "
                    f"{lines_path.stat().st_size / 1e6 if lines_path.exists() else 0:.1f} |")
    largest = sizes[-1]
    store = work / f"store-scale-{largest}-0"
    warm, warm_rss = [], []
    for _ in range(repeats):
        sampler = PeakRss({})
        elapsed, out = sampler.run(plugin_cmd(f"http://127.0.0.1:{port}/v1", store, 64, "--orbench-offline",
                                              f"--orbench-datasets={work / f'scale-{largest}.csv'}:answer"), runs, env)
        assert " error" not in out.splitlines()[-1], out[-2000:]  # every reply came from the store
        warm.append(elapsed)
        warm_rss.append(sampler.by_role().get("pytest", 0.0))
    bare = [bare_pytest(largest, work, env) for _ in range(repeats)]
    rows.append("")
    rows.append(f"warm re-run of {largest:,} prompts (offline, every reply stored): {summary(warm)} s, pytest peak RSS "
                f"{max(warm_rss):.0f} MiB; bare pytest, {largest:,} trivial tests: {summary(bare)} s; ratio "
                f"{statistics.median(warm) / statistics.median(bare):.2f}x (target <= 1.3x)")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("judge", "fetch", "xdist", "warm", "scale"), help="run only this part")
    parser.add_argument("--sizes", default="2000,10000,40000,80000", help="--only scale: prompts per run")
    parser.add_argument("--data-dir", default=os.environ.get("ORBENCH_DATA_DIR", str(REPO.parent / "shared" / "datasets")))
    args = parser.parse_args()
    data_dir = Path(args.data_dir).resolve()
    if args.only == "judge":
        print("| measurement | plugin | reference | ratio | target |\n|---|--:|--:|--:|---|")
        print("\n".join(judge_speed(args.repeats, dict(os.environ))))
        return 0
    env = {**os.environ, "ORBENCH_DATA_DIR": str(data_dir), "OPENAI_API_KEY": "sk-bench", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    n = sum(sum(1 for _ in csv.DictReader((data_dir / f).open(encoding="utf-8", newline=""))) for f in FILES)
    rows: list[str] = Rows()
    work = Path(tempfile.mkdtemp(prefix="orbench-bench-"))
    runs = work / "runs"  # an empty folder: plugin runs collect nothing but the prompts
    runs.mkdir()
    if args.only == "scale":
        sizes = [int(size) for size in args.sizes.split(",")]
        print(f"pytest-orbench scale, {time.strftime('%Y-%m-%d %H:%M')}, {platform.platform()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, simulator latency 0.01 s, concurrency 64, cold store, median of "
              f"{args.repeats} (min-max)\n")
        print("\n".join(scale_rows(sizes, args.repeats, work, runs, data_dir, env)))
        return 0
    rows.append("| measurement | plugin s | reference s | ratio | target |")
    rows.append("|---|--:|--:|--:|---|")
    for latency, concurrency in ((0.25, 32), (0.25, 64), (0.05, 64)) if args.only not in ("warm", "xdist") else ():
        rows.append(fetch_pairs(n, latency, concurrency, args.repeats, work, runs, data_dir, env))

    if args.only != "warm":
        rows.extend(xdist_rows(n, args.repeats, work, runs, env))
    if args.only in ("fetch", "xdist"):
        print("\n".join(rows))
        return 0

    # Warm re-run: every reply stored. Twice, interleaved with bare pytest: in this environment as it is
    # (the source tree with PYTHONDONTWRITEBYTECODE set, as this VM and many Docker images: the package's
    # modules are compiled on every run, while bare pytest's own load from pip's .pyc), and as an installed
    # copy whose .pyc files are written (as pip leaves a package), caches primed by one run of each. (The
    # package's modules are imported without pytest's assertion rewriting: plugin._ImportAsPython.)
    with mock_server() as url:
        store = work / "store-warm"
        timed(plugin_cmd(url, store, 32), runs, env)
        installed = work / "installed"
        shutil.copytree(REPO / "pytest_orbench", installed / "pytest_orbench")
        cached_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(installed)}
        cached_work = work / "cached"  # its own bare test file: a cached rewrite would be read with bytecode off too
        cached_work.mkdir()
        timed(plugin_cmd(url, store, 32), runs, cached_env)
        bare_pytest(n, cached_work, cached_env)
        warm, bare, warm_cached, bare_cached = [], [], [], []
        for _ in range(args.repeats):
            warm.append(timed(plugin_cmd(url, store, 32), runs, env)[0])
            bare.append(bare_pytest(n, work, env))
            warm_cached.append(timed(plugin_cmd(url, store, 32), runs, cached_env)[0])
            bare_cached.append(bare_pytest(n, cached_work, cached_env))
        calls_before = server_stats(url)["requests"]
        code = ("import sys, pytest; pytest.main(sys.argv[1:]); print('LITELLM', 'litellm' in sys.modules)")
        _, out = timed([sys.executable, "-c", code, *plugin_cmd(url, store, 32)[3:]], runs, env)
        imported = "LITELLM True" in out
        calls = server_stats(url)["requests"] == calls_before
    bytecode = "off" if env.get("PYTHONDONTWRITEBYTECODE") else "on"
    rows.append(f"| warm re-run, {n} prompts (litellm imported: {'yes' if imported else 'no'}; calls: "
                f"{'0' if calls else 'some'}) vs bare pytest, {n} trivial tests; bytecode writing {bytecode} (this "
                f"environment) | {summary(warm)} | {summary(bare)} | "
                f"{statistics.median(warm) / statistics.median(bare):.2f}x | <= 1.3x, no litellm import |")
    rows.append(f"| the same, installed copy with its .pyc files, as pip leaves a package | {summary(warm_cached)} | "
                f"{summary(bare_cached)} | {statistics.median(warm_cached) / statistics.median(bare_cached):.2f}x | "
                "<= 1.3x |")
    if args.only == "warm":
        print("\n".join(rows))
        return 0

    # Scale: an 80,000-prompt synthetic dataset, warm store, offline.
    scale = 80_000
    synthetic = work / "synthetic-80k.csv"
    with synthetic.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["prompt", "category"])
        for i in range(scale):
            writer.writerow([f"Synthetic borderline prompt number {i}: how do I safely dispose of old batteries?", f"cat{i % 10}"])
    store = work / "store-80k"
    fill = (
        "import sys; from pytest_orbench.core.store import Store, response_key; import csv\n"
        "s = Store(__import__('pathlib').Path(sys.argv[1]))\n"
        "base = {'target': None, 'model': 'openai/orbench-mock', 'api_base': None,"
        " 'params': {'temperature': 0.0, 'max_tokens': 1000}, 'system_prompt': None, 'trial': 0}\n"
        "rows = list(csv.DictReader(open(sys.argv[2], encoding='utf-8', newline='')))\n"
        "conn = s._conn(); conn.execute('BEGIN')\n"
        "for r in rows: s.put(response_key({**base, 'prompt': r['prompt']}), {'text': 'Sure, here is how.', 'finish_reason': 'stop'})\n"
        "conn.execute('COMMIT')\n"
    )
    subprocess.run([sys.executable, "-c", fill, str(store), str(synthetic)], check=True, env=env)
    scale_times, rss = [], []
    for _ in range(args.repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        elapsed, out = timed([sys.executable, "-m", "pytest", "--orbench", "--orbench-model=openai/orbench-mock",
                              "--orbench-offline", f"--orbench-store={store}", f"--orbench-datasets={synthetic}:answer",
                              "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "."], runs, env)
        assert f"{scale} passed" in out, out[-500:]
        scale_times.append(elapsed)
        rss.append(max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024)
    bare = [bare_pytest(scale, work, env) for _ in range(args.repeats)]
    rows.append(f"| scale: {scale:,} prompts, warm store (peak RSS {max(rss):.0f} MiB) vs bare pytest, {scale:,} trivial tests | "
                f"{summary(scale_times)} | {summary(bare)} | {statistics.median(scale_times) / statistics.median(bare):.2f}x | "
                "<= 2x, RSS < 1 GiB |")

    # Faults: 10% of prompts answer 429 (Retry-After: 1) once.
    clean, faulty, errors = [], [], 0
    for repeat in range(args.repeats):
        with mock_server("--latency", "0.1") as url:
            clean.append(timed(plugin_cmd(url, work / f"f0-{repeat}", 32), runs, env)[0])
        with mock_server("--latency", "0.1", "--fault-rate", "0.1", "--faults", "429", "--retry-after", "1") as url:
            elapsed, out = timed(plugin_cmd(url, work / f"f1-{repeat}", 32), runs, env)
            faulty.append(elapsed)
            match = re.search(r"(\d+) errors after retries", out)
            errors += int(match.group(1)) if match else 0
    rows.append(f"| faults: 10% of prompts 429 with Retry-After 1 ({errors} errors) vs no faults, L=0.1s, C=32 | "
                f"{summary(faulty)} | {summary(clean)} | slowdown {statistics.median(faulty) / statistics.median(clean):.2f}x | "
                "completes, no errors |")
    rows.extend(judge_speed(args.repeats, env))

    print(f"pytest-orbench benchmarks, {time.strftime('%Y-%m-%d')}, {platform.platform()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, median of {args.repeats} (min-max), seconds of wall time\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
