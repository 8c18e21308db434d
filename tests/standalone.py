"""A Spark standalone cluster on 127.0.0.1, started from the pip-installed pyspark.

``spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``
exactly as an operator starts them (no extra download), bound to loopback
only. Everything started is stopped on exit, executors included.

    with StandaloneCluster(workers=2, cores_per_worker=1, memory="1g",
                           worker_env=bare_python_env) as cluster:
        subprocess.run(["spark-submit", "--master", cluster.master_url, ...])

``worker_env`` replaces the workers' environment (PATH, PYSPARK_PYTHON, ...),
so a test can give them a Python without numpy, like a fresh cluster node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from typing import Dict, List, Optional

LOOPBACK = "127.0.0.1"


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def spark_bin(name: str) -> str:
    return os.path.join(spark_home(), "bin", name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def loopback_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``base`` (default: this process's environment) with Spark bound to loopback."""
    env = dict(os.environ if base is None else base)
    env["SPARK_LOCAL_IP"] = LOOPBACK
    env["SPARK_LOCAL_HOSTNAME"] = LOOPBACK
    env["SPARK_HOME"] = spark_home()
    env.setdefault("JAVA_HOME", os.path.dirname(os.path.dirname(os.path.realpath(_which_java()))))
    return env


def _which_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return os.path.join(java_home, "bin", "java")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, "java")
        if os.path.exists(candidate):
            return candidate
    raise RuntimeError("java not found on PATH or JAVA_HOME")


def children(pid: int) -> List[int]:
    """Direct child PIDs of ``pid`` (Linux /proc)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(entry))
    return kids


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class StandaloneCluster:
    """One master and ``workers`` workers on 127.0.0.1; a context manager."""

    def __init__(
        self,
        workers: int = 2,
        cores_per_worker: int = 1,
        memory: str = "1g",
        worker_env: Optional[Dict[str, str]] = None,
        log_dir: Optional[str] = None,
        start_timeout: float = 120.0,
    ):
        self.n_workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory = memory
        self.worker_env = worker_env
        self.log_dir = log_dir
        self.start_timeout = start_timeout
        self.port = free_port()
        self.webui_port = free_port()
        self.master_url = f"spark://{LOOPBACK}:{self.port}"
        self.master: Optional[subprocess.Popen] = None
        self.workers: List[subprocess.Popen] = []
        self._logs: List[object] = []

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self) -> "StandaloneCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _log(self, name: str):
        if not self.log_dir:
            return subprocess.DEVNULL
        os.makedirs(self.log_dir, exist_ok=True)
        fh = open(os.path.join(self.log_dir, name), "wb")
        self._logs.append(fh)
        return fh

    def start(self) -> None:
        spark_class = spark_bin("spark-class")
        master_env = loopback_env()
        master_env["SPARK_MASTER_OPTS"] = "-Dspark.ui.showConsoleProgress=false"
        # Each daemon runs in its own process group, so stop() can signal it
        # (and nothing else) even if it forked.
        self.master = subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
            ],
            env=master_env,
            stdout=self._log("master.log"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait(lambda state: state is not None, "master to start")
        for i in range(self.n_workers):
            self.start_worker(i)
        self._wait(
            lambda state: state and state.get("aliveworkers", 0) >= self.n_workers,
            f"{self.n_workers} workers to register",
        )

    def start_worker(self, index: int) -> subprocess.Popen:
        env = loopback_env(self.worker_env)
        work_dir = os.path.join(self.log_dir or "/tmp", f"worker-{index}-{self.port}")
        worker = subprocess.Popen(
            [
                spark_bin("spark-class"),
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host",
                LOOPBACK,
                "--cores",
                str(self.cores_per_worker),
                "--memory",
                self.memory,
                "--webui-port",
                str(free_port()),
                "--work-dir",
                work_dir,
            ],
            env=env,
            stdout=self._log(f"worker-{index}.log"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers.append(worker)
        return worker

    def state(self) -> Optional[dict]:
        """The master's JSON status, or None while it is not answering."""
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.webui_port}/json/", timeout=2) as resp:
                return json.loads(resp.read().decode())
        except (OSError, ValueError):
            return None

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"Spark master exited ({self.master.returncode}) while waiting for {what}")
            if ready(self.state()):
                return
            time.sleep(0.5)
        raise TimeoutError(f"timed out after {self.start_timeout:.0f}s waiting for {what}")

    def executor_pids(self, worker_index: int) -> List[int]:
        """PIDs of the executor JVMs the worker ``worker_index`` launched."""
        worker = self.workers[worker_index]
        return [pid for pid in children(worker.pid) if "CoarseGrainedExecutorBackend" in cmdline(pid)]

    def stop(self) -> None:
        procs = list(self.workers) + ([self.master] if self.master else [])
        executors = []
        for i in range(len(self.workers)):
            executors.extend(self.executor_pids(i))
        for pid in executors:
            _signal(pid, signal.SIGKILL)
        for proc in procs:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for fh in self._logs:
            fh.close()
        self._logs = []
        self.workers = []
        self.master = None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
