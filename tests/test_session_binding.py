"""A local run's Spark UI, driver RPC and block manager listen on 127.0.0.1 only.

The shared test session (conftest.py) already has a JVM in this process, with
the UI off, so the real check runs ``build_session`` in a fresh Python
process with the CLI's own settings (conf/pcem.toml, where the UI is on) and
reads that process's JVM listening sockets from /proc.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pcem_spark.cli.config import SparkSettings, load_settings
from pcem_spark.engine import session as session_module

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}

# Variables of the surrounding environment that would change what the child does:
# a gateway of this process (spark-submit mode), a user's binding, Connect mode,
# pyspark's test switch that turns the UI off.
_CHILD_DROPS = (
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
    "SPARK_LOCAL_IP",
    "SPARK_LOCAL_HOSTNAME",
    "SPARK_PUBLIC_DNS",
    "SPARK_REMOTE",
    "SPARK_CONNECT_MODE_ENABLED",
    "SPARK_LOCAL_REMOTE",
    "SPARK_API_MODE",
    "SPARK_TESTING",
    "PYSPARK_SUBMIT_ARGS",
    "MASTER",
)

_PROBE = textwrap.dedent(r"""
    import json, os, socket, struct, sys, urllib.request
    from pcem_spark.cli.config import load_settings
    from pcem_spark.engine.session import build_session

    settings = load_settings(os.path.join(sys.argv[1], "conf", "pcem.toml"),
                             ["spark.master=local[1]", "spark.conf.spark.driver.memory=1g"])
    spark = build_session(settings.spark)
    sc = spark.sparkContext
    assert sc.parallelize(range(10), 2).sum() == 45   # the block manager has served a job

    def descendants(root):
        parents = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as fh:
                        parents[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    pass
        found, todo = [], [root]
        while todo:
            pid = todo.pop()
            kids = [p for p, pp in parents.items() if pp == pid]
            found += kids
            todo += kids
        return found

    def exe(pid):
        try:
            return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            return ""

    jvms = [pid for pid in descendants(os.getpid()) if exe(pid) == "java"]
    inodes = set()
    for pid in jvms:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])

    def address(hexaddr):
        raw = bytes.fromhex(hexaddr)
        # /proc/net/tcp*: each 32-bit word in host (little-endian) order.
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
        return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)

    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for line in fh:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:   # LISTEN, one of the JVM's sockets
                    host, port = cols[1].split(":")
                    listening.append([address(host), int(port, 16)])

    url = sc.uiWebUrl
    ui_port = int(url.rsplit(":", 1)[1]) if url else None
    status, executors = None, []
    if ui_port:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/jobs/", timeout=30) as resp:
            status = resp.status
        # The UI's REST API: the driver's block manager host:port.
        api = f"http://127.0.0.1:{ui_port}/api/v1/applications/{sc.applicationId}/executors"
        with urllib.request.urlopen(api, timeout=30) as resp:
            executors = json.load(resp)
    block_managers = [e["hostPort"] for e in executors if e["id"] == "driver"]
    conf = sc.getConf()
    print("PROBE " + json.dumps({
        "jvms": jvms, "listening": listening, "ui_url": url, "ui_port": ui_port, "ui_status": status,
        "driver_host": conf.get("spark.driver.host"), "bind_address": conf.get("spark.driver.bindAddress"),
        "driver_port": int(conf.get("spark.driver.port")),
        "block_manager": block_managers[0] if block_managers else None,
        "spark_local_ip": os.environ.get("SPARK_LOCAL_IP")}))
    spark.stop()
""")


@pytest.mark.slow
def test_local_cli_run_listens_on_loopback_only():
    """conf/pcem.toml with a local master: the UI is up, on 127.0.0.1, and no JVM socket is on *."""
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_DROPS}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, REPO], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")][-1]
    probe = json.loads(line[len("PROBE ") :])
    assert probe["jvms"], probe
    ports = {port for _, port in probe["listening"]}
    exposed = [sock for sock in probe["listening"] if sock[0] not in LOOPBACK]
    assert not exposed, f"JVM sockets listening beyond loopback: {exposed} (all: {probe})"
    # The UI is on (the CLI's default) and answers on loopback.
    assert probe["ui_port"] in ports and probe["ui_status"] == 200, probe
    assert probe["ui_url"] == f"http://127.0.0.1:{probe['ui_port']}", probe
    # Driver RPC and block manager: advertised and bound on 127.0.0.1.
    assert probe["driver_host"] == "127.0.0.1" and probe["bind_address"] == "127.0.0.1", probe
    bm_host, bm_port = probe["block_manager"].rsplit(":", 1)
    assert bm_host == "127.0.0.1" and {probe["driver_port"], int(bm_port)} <= ports, probe
    assert probe["spark_local_ip"] == "127.0.0.1", probe


# --- what build_session hands to the builder, without a JVM ---------------------------------


class _FakeBuilder:
    def __init__(self):
        self.options = {}

    def appName(self, name):
        return self

    def master(self, master):
        self.options["spark.master"] = master
        return self

    def config(self, key, value):
        self.options[key] = value
        return self

    def getOrCreate(self):
        return _FakeSession()


class _FakeContext:
    def setLogLevel(self, level):
        pass


class _FakeSession:
    sparkContext = _FakeContext()


_ENV = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME", "PYSPARK_GATEWAY_PORT", "SPARK_REMOTE", "SPARK_API_MODE")


@pytest.fixture
def fake_builder(monkeypatch):
    """``build_session`` against a recording builder; the environment is restored afterwards."""
    for name in _ENV + ("PYSPARK_PYTHON",):
        monkeypatch.setenv(name, "placeholder")  # recorded, so teardown restores the real value
        monkeypatch.delenv(name)
    builder = _FakeBuilder()

    class FakeSparkSession:
        pass

    FakeSparkSession.builder = builder
    monkeypatch.setattr(session_module, "SparkSession", FakeSparkSession)
    # As in a fresh CLI process: no SparkContext and no JVM yet (the shared test session has both).
    monkeypatch.setattr(session_module, "_jvm_state", lambda: (False, False))
    return builder


def test_local_master_gets_loopback_binding(fake_builder):
    for master in ("local", "local[2]", "local[2,3]", "local[*]", "local[*,4]"):
        fake_builder.options.clear()
        os.environ.pop("SPARK_LOCAL_IP", None)
        session_module.build_session(SparkSettings(master=master))
        assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1", master
        assert fake_builder.options["spark.driver.host"] == "127.0.0.1", master
        assert fake_builder.options["spark.driver.bindAddress"] == "127.0.0.1", master
        assert "spark.ui.enabled" not in fake_builder.options  # the UI stays on, on loopback


@pytest.mark.parametrize(
    "master", ["spark://10.0.0.5:7077", "yarn", "k8s://https://k8s:443", "local-cluster[2,1,1024]"]
)
def test_cluster_or_unknown_master_is_left_as_configured(fake_builder, master):
    session_module.build_session(SparkSettings(master=master))
    assert "SPARK_LOCAL_IP" not in os.environ
    assert not {"spark.driver.host", "spark.driver.bindAddress", "spark.ui.enabled"} & set(fake_builder.options)


def test_no_master_is_pysparks_local_default_unless_the_environment_may_name_one(fake_builder, monkeypatch, tmp_path):
    for var in ("PYSPARK_SUBMIT_ARGS", "MASTER", "SPARK_CONF_DIR", "SPARK_HOME", "SPARK_LOCAL_IP"):
        monkeypatch.delenv(var, raising=False)
    session_module.build_session(SparkSettings(master=None))
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert fake_builder.options["spark.driver.host"] == "127.0.0.1"
    for var, value in (("PYSPARK_SUBMIT_ARGS", "--master yarn pyspark-shell"), ("SPARK_CONF_DIR", str(tmp_path))):
        (tmp_path / "spark-defaults.conf").write_text("spark.master spark://10.0.0.5:7077\n")
        fake_builder.options.clear()
        os.environ.pop("SPARK_LOCAL_IP", None)
        monkeypatch.setenv(var, value)
        session_module.build_session(SparkSettings(master=None))
        assert "SPARK_LOCAL_IP" not in os.environ and "spark.driver.host" not in fake_builder.options, var
        monkeypatch.delenv(var)


def test_spark_submit_is_left_as_configured(fake_builder, monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "12345")
    session_module.build_session(SparkSettings(master="local[2]"))
    assert "SPARK_LOCAL_IP" not in os.environ
    assert "spark.master" not in fake_builder.options and "spark.driver.host" not in fake_builder.options


def test_users_spark_local_ip_is_kept(fake_builder, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    session_module.build_session(SparkSettings(master="local[2]"))
    assert os.environ["SPARK_LOCAL_IP"] == "10.1.2.3"
    # Spark derives the driver's address from SPARK_LOCAL_IP: not overridden either.
    assert "spark.driver.host" not in fake_builder.options
    assert "spark.driver.bindAddress" not in fake_builder.options


@pytest.mark.parametrize("key", ["spark.driver.host", "spark.driver.bindAddress"])
def test_users_driver_address_is_kept(fake_builder, key):
    session_module.build_session(SparkSettings(master="local[2]", conf={key: "myhost.example"}))
    assert fake_builder.options[key] == "myhost.example"
    other = ({"spark.driver.host", "spark.driver.bindAddress"} - {key}).pop()
    assert other not in fake_builder.options  # Spark's own fallback between the two applies
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"  # the UI still binds to loopback


def test_running_jvm_without_loopback_turns_the_ui_off(fake_builder, monkeypatch):
    """A second session in a process whose JVM started without SPARK_LOCAL_IP: the UI cannot move."""
    monkeypatch.setattr(session_module, "_jvm_state", lambda: (False, True))
    session_module.build_session(SparkSettings(master="local[2]"))
    assert fake_builder.options["spark.ui.enabled"] == "false"
    assert fake_builder.options["spark.driver.host"] == "127.0.0.1"
    assert "SPARK_LOCAL_IP" not in os.environ  # too late for the JVM; not left behind either
    # The user asked for the UI explicitly: kept.
    fake_builder.options.clear()
    session_module.build_session(SparkSettings(master="local[2]", conf={"spark.ui.enabled": "true"}))
    assert fake_builder.options["spark.ui.enabled"] == "true"


def test_active_context_is_left_alone(fake_builder, monkeypatch):
    """getOrCreate returns the running session; nothing to bind, and no variable leaks into the process."""
    monkeypatch.setattr(session_module, "_jvm_state", lambda: (True, True))
    session_module.build_session(SparkSettings(master="local[2]"))
    assert "SPARK_LOCAL_IP" not in os.environ and "spark.driver.host" not in fake_builder.options


def test_default_settings_file_has_a_local_master():
    """The CLI's default settings are what the subprocess test runs: a local master, the UI not turned off."""
    settings = load_settings(os.path.join(REPO, "conf", "pcem.toml"))
    assert session_module.is_local_master(settings.spark.master)
    assert settings.spark.conf.get("spark.ui.enabled", "true") == "true"
