"""Secrets are never printed or stored: pcem_spark.util.redaction, and every ``pcem`` command run with object-store
credentials given by --set, by the environment and by a settings file (their logs, their output on the console,
every file they write)."""

import doctest
import json
import logging
import os
import secrets
import sys
from collections import namedtuple
from dataclasses import asdict

import pyarrow.parquet as pq
import pytest

import pcem_spark.util.redaction as redaction
from pcem_spark.errors import InputError
from pcem_spark.util.redaction import (
    DEFAULT_REDACTION_REGEX,
    REDACTED,
    RedactingFormatter,
    configure_redaction,
    is_secret_key,
    redact,
    redact_log_handlers,
    register_secrets,
    sql_redactions,
)

sys.path.insert(0, os.path.dirname(__file__))
from warc_fixtures import topic_pages, write_warc  # noqa: E402  (tests/warc_fixtures.py)


def _secret(name: str) -> str:
    """A distinctive random secret: it cannot appear anywhere by chance."""
    return f"{name}{secrets.token_hex(12)}"


@pytest.fixture(autouse=True)
def isolated_redaction():
    """Each test starts from Spark's default pattern and leaves the process's registered secrets as it found them."""
    state = redaction._STATE
    saved = (state.source, state.keys, set(state.secrets), state.values)
    configure_redaction()
    yield
    with state.lock:
        state.source, state.keys, state.secrets, state.values = saved[0], saved[1], saved[2], saved[3]


# ----------------------------------------------------------------- the function


def test_settings_whose_names_match_sparks_default_pattern_are_redacted():
    s = _secret("S")
    conf = {
        "spark.hadoop.fs.s3a.secret.key": s,
        "spark.hadoop.fs.s3a.access.key": "AKIAEXAMPLE",
        "spark.hadoop.fs.s3a.session.token": s,
        "javax.jdo.option.ConnectionPassword": s,
        "AWS_SECRET_ACCESS_KEY": s,
        "spark.hadoop.fs.s3a.accessKey": s,
        "spark.sql.shuffle.partitions": "8",
        "spark.hadoop.fs.s3a.endpoint": "https://s3.example",
        "spark.hadoop.fs.s3a.secret.key.empty": "",
    }
    got = redact(conf)
    assert got == {
        **{k: REDACTED for k in conf},
        "spark.sql.shuffle.partitions": "8",
        "spark.hadoop.fs.s3a.endpoint": "https://s3.example",
        "spark.hadoop.fs.s3a.secret.key.empty": "",
    }
    assert conf["spark.hadoop.fs.s3a.secret.key"] == s  # the argument is not changed
    assert DEFAULT_REDACTION_REGEX == "(?i)secret|password|token|access[.]?key"  # Spark's default
    # pcem's words for a document's tokens are not secrets; numbers and tables under a matching name are kept
    plain = {
        "tokenizer": "python",
        "token_pattern": r"(?U)\b\w+\b",
        "min_token_length": 2,
        "names_kept_tokens": 10.0,
        "minTokenLength": "2",
        "TOKENIZERS_PARALLELISM": "false",
        "per_node": {"security.passwords": {"tp": 3, "fp": 1}},
        "mass": {"tokens": 0.5, "password": 2},
    }
    assert redact(plain) == plain
    assert is_secret_key("spark.kubernetes.authenticate.submission.oauthToken") and is_secret_key("ADMIN_TOKEN")
    assert not is_secret_key("spark.sql.shuffle.partitions")


def test_the_users_spark_redaction_regex_is_honoured():
    azure, mine = _secret("AZ"), _secret("MINE")
    conf = {
        "spark.redaction.regex": r"(?i)fs\.azure\.account\.key|credential",
        "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net": azure,
        "my.secret": "not a secret under this pattern",
    }
    configure_redaction(conf=conf)
    assert redact(conf)["spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net"] == REDACTED
    assert redact(conf)["my.secret"] == "not a secret under this pattern"
    assert redact(f"logged {azure} here") == f"logged {REDACTED} here"  # registered under the user's pattern
    assert redact("gcs.credential=abc123def") == f"gcs.credential={REDACTED}"
    configure_redaction(regex=r"(?i)\bmine\b")
    assert redact({"mine": mine})["mine"] == REDACTED
    configure_redaction()  # back to Spark's default
    assert redact({"my.secret": mine})["my.secret"] == REDACTED
    with pytest.raises(InputError, match="spark.redaction.regex = '\\(unclosed': not a regular expression"):
        configure_redaction(regex="(unclosed")


def test_credentials_in_urls_are_redacted():
    s = _secret("U")
    assert redact(f"s3a://AKIAEXAMPLE:{s}@bucket/docs.jsonl") == f"s3a://{REDACTED}@bucket/docs.jsonl"
    assert redact(f"s3a://AKIAEXAMPLE:ab/{s}@bucket/x") == f"s3a://{REDACTED}@bucket/x"  # "/" in a secret key
    assert (
        redact(f"read https://user:{s}@host.example/a?b=1 failed")
        == f"read https://{REDACTED}@host.example/a?b=1 failed"
    )
    assert redact(f"https://{s}@github.com/o/r.git") == f"https://{REDACTED}@github.com/o/r.git"
    assert redact(f"jdbc:mysql://root:{s}@db:3306/x") == f"jdbc:mysql://{REDACTED}@db:3306/x"
    # a port, an e-mail in a path, a plain URL: unchanged
    for text in ("https://host:8080/users/me@example.com", "hdfs://nn:8020/data/docs", "mailto a@b.c"):
        assert redact(text) == text
    presigned = (
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20240101"
        f"&X-Amz-Security-Token={s}&X-Amz-Signature=0a1b2c3d&sig=zzzz&token={s}&page=2"
    )
    assert redact(presigned) == (
        f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={REDACTED}"
        f"&X-Amz-Security-Token={REDACTED}&X-Amz-Signature={REDACTED}&sig={REDACTED}&token={REDACTED}&page=2"
    )
    assert redact(f"sc://host:15002/;token={s};user_id=me") == f"sc://host:15002/;token={REDACTED};user_id=me"
    # the URL's password is registered: caught later on its own (a Java message that names it alone)
    assert redact(f"java.io.IOException: bad key {s}") == f"java.io.IOException: bad key {REDACTED}"


def test_key_value_pairs_in_text_are_redacted():
    s = _secret("KV")
    assert redact(f"--set spark.conf.spark.hadoop.fs.s3a.secret.key={s} --set model.max_iter=3") == (
        f"--set spark.conf.spark.hadoop.fs.s3a.secret.key={REDACTED} --set model.max_iter=3"
    )
    assert redact(f'{{"spark.hadoop.fs.s3a.session.token": "{s}", "n": 1}}') == (
        f'{{"spark.hadoop.fs.s3a.session.token": "{REDACTED}", "n": 1}}'
    )
    assert redact(f"{{'password': '{s} with spaces'}}") == f"{{'password': '{REDACTED}'}}"
    assert redact(f"password: {s}") == f"password: {REDACTED}"
    assert redact(f"-Djavax.net.ssl.trustStorePassword={s} -Xmx2g") == (
        f"-Djavax.net.ssl.trustStorePassword={REDACTED} -Xmx2g"
    )
    assert redact(f"AWS_SESSION_TOKEN={s}, region=eu-west-1") == f"AWS_SESSION_TOKEN={REDACTED}, region=eu-west-1"
    text = "FeatureSettings(token_pattern='(?U)\\b\\w+\\b', min_token_length=2, tokenizer='python'); 12:30:01 a: b"
    assert redact(text) == text


def test_nested_values_keep_their_types():
    s = _secret("N")
    Pair = namedtuple("Pair", "name path")
    value = {
        "input": {"source": f"s3a://K:{s}@b/docs", "rows": 3, "split": None},
        "inputs": [f"s3a://K:{s}@b/a", ("x", f"secret={s}")],
        "pair": Pair("p", f"https://u:{s}@h/p"),
        "set": frozenset({"plain"}),
        "ratio": 0.5,
        "password": [s, "other"],
        7: "seven",
    }
    got = redact(value)
    assert got["input"] == {"source": f"s3a://{REDACTED}@b/docs", "rows": 3, "split": None}
    assert got["inputs"] == [f"s3a://{REDACTED}@b/a", ("x", f"secret={REDACTED}")]
    assert isinstance(got["pair"], Pair) and got["pair"].path == f"https://{REDACTED}@h/p"
    assert got["set"] == frozenset({"plain"}) and got["ratio"] == 0.5 and got[7] == "seven"
    assert got["password"] == REDACTED  # a list of strings under a secret's name: hidden whole
    assert s not in json.dumps(got, default=str)
    # keys=False: only the text of the strings, never a value by its key (a checkpoint's fingerprint)
    assert redact({"password": "kept", "p": f"s3a://K:{s}@b"}, keys=False) == {
        "password": "kept",
        "p": f"s3a://{REDACTED}@b",
    }


def test_registered_secrets_are_redacted_anywhere_and_short_ones_are_ignored():
    conf_secret, env_secret, token, url_secret = _secret("C"), _secret("E"), _secret("T"), _secret("P")
    configure_redaction(
        conf={
            "spark.hadoop.fs.s3a.secret.key": conf_secret,
            "spark.hadoop.fs.s3a.endpoint": "https://s3.example",
            "spark.executor.extraJavaOptions": "-Dkeystore.password=Kp4ssw0rdZ",
        },
        environ={
            "AWS_SECRET_ACCESS_KEY": env_secret,
            "AWS_SESSION_TOKEN": token,
            "HOME": "/home/someone",
            "GITHUB_TOKEN": "abc",  # too short to look for
            "SOME_PASSWORD": "true",  # a word, not a secret
        },
        texts=[["--docs", f"s3a://AKIAEXAMPLE:{url_secret}@bucket/docs.jsonl"]],
    )
    message = (
        f"py4j.protocol.Py4JJavaError: An error occurred: com.amazonaws.AmazonClientException: "
        f"signature mismatch for {conf_secret} (env {env_secret}, {token}) reading /{url_secret}/x "
        "Kp4ssw0rdZ; abc is true in /home/someone"
    )
    assert redact(message) == (
        f"py4j.protocol.Py4JJavaError: An error occurred: com.amazonaws.AmazonClientException: "
        f"signature mismatch for {REDACTED} (env {REDACTED}, {REDACTED}) reading /{REDACTED}/x "
        f"{REDACTED}; abc is true in /home/someone"
    )
    slash = "ab/cd+" + _secret("Q")
    register_secrets([slash, "xyz", ""])
    assert redact(f"s3a://bucket/{slash.replace('/', '%2F').replace('+', '%2B')}") == f"s3a://bucket/{REDACTED}"
    assert redact("xyz and abc stay") == "xyz and abc stay"


def test_redaction_is_idempotent():
    s = _secret("I")
    register_secrets([s])
    samples = [
        f"s3a://K:{s}@b/p",
        f"spark.hadoop.fs.s3a.secret.key={s}, spark.sql.shuffle.partitions=8",
        f'{{"token": "{s}"}}',
        f"password: {s}",
        f"https://h/p?X-Amz-Signature=abc&token={s}",
        f"plain {s} text",
        f"https://{s}@github.com/x",
    ]
    for text in samples:
        once = redact(text)
        assert s not in once and REDACTED in once and redact(once) == once, text
    assert redact({"password": REDACTED}) == {"password": REDACTED}


def test_the_log_formatter_redacts_messages_arguments_and_tracebacks():
    s = _secret("L")
    register_secrets([s])
    logger = logging.getLogger("pcem.test_redaction")
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    handler = Keep()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    try:
        redact_log_handlers(logger)
        redact_log_handlers(logger)  # twice: wrapped once
        assert isinstance(handler.formatter, RedactingFormatter)
        assert not isinstance(handler.formatter.wrapped, RedactingFormatter)
        logger.warning("reading %s with %s", f"s3a://K:{_secret('X')}@b/x", f"access.key={s}")
        try:
            raise OSError(f"cannot open https://user:{_secret('Y')}@h/x: key {s}")
        except OSError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    assert records[0] == f"WARNING reading s3a://{REDACTED}@b/x with access.key={REDACTED}"
    assert records[1].startswith("ERROR failed\nTraceback") and f"https://{REDACTED}@h/x: key {REDACTED}" in records[1]
    assert s not in "".join(records)
    plain = RedactingFormatter("%(message)s")  # without a wrapped formatter: formats as logging.Formatter does
    assert plain.format(logging.makeLogRecord({"msg": "token=%s", "args": (s,)})) == f"token={REDACTED}"


def test_the_spark_sql_rule_matches_the_python_one(spark):
    from pcem_spark.io.rejects import redacted_column

    s = _secret("SQL")
    paths = [
        f"s3a://AKIAEXAMPLE:{s}@bucket/crawl/a.warc.gz",
        f"s3a://AKIAEXAMPLE:ab/{s}@bucket/b",
        "file:/tmp/plain/c.warc.gz",
        "https://host:8080/users/me@example.com",
        None,
    ]
    df = spark.createDataFrame([(p,) for p in paths], "source_file string")
    got = [r["source_file"] for r in df.select(redacted_column("source_file")).collect()]
    assert got == [None if p is None else redact(p) for p in paths]
    assert len(sql_redactions()) == 1 and s not in repr(sql_redactions())  # never a secret in a query plan


def test_pcems_own_settings_are_not_mistaken_for_secrets():
    """Every setting of every section (but [spark]) keeps its value: none is named like a secret."""
    from pcem_spark.cli.config import _SECTIONS, load_settings

    settings = load_settings(None, environment=False)
    table = {name: asdict(getattr(settings, name)) for name in _SECTIONS if name != "spark"}
    assert redact(table) == table
    assert [k for section in table.values() for k in section if is_secret_key(k)] == []


def test_the_modules_examples():
    failures, tried = doctest.testmod(redaction, optionflags=doctest.ELLIPSIS)
    assert tried >= 3 and failures == 0


# ----------------------------------------------------------------- every command

FAST = [
    "--set",
    "model.smoothing=1.0",
    "--set",
    "model.unlabeled_weight=1.0",
    "--set",
    "model.path_weight=1.0",
    "--set",
    "model.max_iter=3",
    "--set",
    "model.family=generative",
    "--set",
    "model.names=off",
    "--set",
    "model.calibration=none",
    "--set",
    "features.stop_words=none",
    "--set",
    "features.min_df=1",
]
CONF_KEYS = (
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.session.token",
)


@pytest.mark.slow
def test_no_command_prints_or_stores_a_secret(spark, tmp_path, tmp_path_factory, monkeypatch, capfd, caplog):
    from pcem_spark.cli.app import main

    set_secret, env_secret, file_key, file_token = (_secret(n) for n in ("SetS", "EnvS", "FileK", "FileT"))
    url_secret, archive_secret, path_secret = _secret("UrlS"), _secret("ArcS"), _secret("PathS")
    all_secrets = [set_secret, env_secret, file_key, file_token, url_secret, archive_secret, path_secret]
    # The settings file holds two of them by design: it lives outside the folder whose every byte is checked.
    conf_file = tmp_path_factory.mktemp("site-conf") / "site.toml"
    conf_file.write_text(
        f'[spark.conf]\n"spark.hadoop.fs.s3a.access.key" = "{file_key}"\n'
        f'"spark.hadoop.fs.s3a.session.token" = "{file_token}"\n'
    )
    monkeypatch.setenv("PCEM_CONFIG", str(conf_file))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env_secret)
    # Every path of the run holds a secret the process knows (as a presigned path would): whatever a command
    # stores of its paths -- the model's summary, the markers, the reports, the rejects' files -- is checked.
    monkeypatch.setenv("PCEM_TEST_BUCKET_TOKEN", path_secret)
    work = tmp_path / f"run-{path_secret}"
    work.mkdir()
    w = str(work)
    common = ["--set", f"spark.conf.spark.hadoop.fs.s3a.secret.key={set_secret}", "--log-level", "DEBUG"]
    caplog.set_level(logging.DEBUG)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    out, err = [], []

    def run(*argv, code=0):
        got = main([*argv, *common])
        captured = capfd.readouterr()
        out.append(captured.out)
        err.append(captured.err)
        assert got in ((code,) if isinstance(code, int) else code), (
            f"pcem {argv[0]}: exit {got}\n{captured.err[-3000:]}"
        )
        return captured

    try:
        run("quickstart", "--output", f"{w}/qs")
        shown = json.loads(run("settings").out)
        assert {k: shown["spark"]["conf"][k] for k in CONF_KEYS} == {k: REDACTED for k in CONF_KEYS}
        train, test = f"{w}/qs/train.jsonl", f"{w}/qs/test.jsonl"
        run("train", "--docs", train, "--model", f"{w}/model", *FAST)
        run("predict", "--model", f"{w}/model", "--docs", test, "--output", f"{w}/pred", "--node-probabilities")
        run("evaluate", "--predictions", f"{w}/pred", "--model", f"{w}/model", "--output", f"{w}/metrics.json")
        run("inspect", "--model", f"{w}/model", "--predictions", f"{w}/pred", "--output", f"{w}/inspect")
        run("suggest-labels", "--model", f"{w}/model", "--docs", train, "--output", f"{w}/suggest", "--budget", "3")
        os.mkdir(f"{w}/crawl")
        write_warc(f"{w}/crawl/topics.warc.gz", topic_pages(3, lambda words: " ".join(words * 3)))
        with open(f"{w}/crawl/broken.warc.gz", "wb") as fh:  # an unreadable file: a reject naming its file
            fh.write(b"\x1f\x8b\x08\x00garbage, not a gzip member" + bytes(range(256)))
        run("ingest-warc", "--input", f"{w}/crawl", "--output", f"{w}/crawl-docs")
        with open(train) as a, open(test) as b, open(f"{w}/pooled.jsonl", "w") as fh:
            fh.writelines(line for line in [*a, *b] if '"labels"' in line)
            fh.write("not JSON: a reject that names its file\n")
        run(
            "experiment",
            "--docs",
            f"{w}/pooled.jsonl",
            "--output-dir",
            f"{w}/exp",
            "--methods",
            "pcnb",
            "--rates",
            "0.5",
            "--seeds",
            "1",
            *FAST,
        )
        run("report", "--results", f"{w}/exp/results.csv")
        # Credentials in input paths: the commands fail, and say so without them.
        failed = run(
            "ingest-20ng",
            "--archive",
            f"https://reader:{archive_secret}@archive.example/20news-bydate.tar.gz",
            "--output",
            f"{w}/20ng.jsonl",
            code=2,
        )
        assert f"https://{REDACTED}@archive.example/20news-bydate.tar.gz" in failed.err
        failed = run(
            "predict",
            "--model",
            f"{w}/model",
            "--docs",
            f"s3a://AKIAEXAMPLE:{url_secret}@bucket/docs.jsonl",
            "--output",
            f"{w}/pred-s3",
            code=(2, 75),
        )
        assert failed.err.startswith("pcem predict: ")
    finally:
        for key in CONF_KEYS:  # the --set / PCEM_CONFIG entries reached the shared session's runtime settings
            spark.conf.unset(key)

    # The first line of every command names the Spark settings, the secrets redacted.
    firsts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("settings: ")]
    assert len(firsts) == 12
    assert all(f"{key}={REDACTED}" in line for line in firsts for key in CONF_KEYS)
    # The log records as the command line's handler writes them (tracebacks included), what pytest's handler
    # wrote (pcem wrapped its formatter too), the console, and every byte of every file the commands wrote.
    layout = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    raw = "\n".join(logging.Formatter(layout).format(r) for r in caplog.records)
    assert archive_secret in raw  # a traceback names it: the formatter, not luck, keeps it out of the log
    logged = "\n".join(RedactingFormatter(layout).format(r) for r in caplog.records)
    texts = {"log records": logged, "caplog": caplog.text, "stdout": "".join(out), "stderr": "".join(err)}
    written = []
    for root, _, files in os.walk(work):
        for name in files:
            path = os.path.join(root, name)
            written.append(os.path.relpath(path, w))
            with open(path, "rb") as fh:
                texts[path] = fh.read().decode("latin-1")
            if name.endswith(".parquet"):  # compressed: its values are read too
                texts[path + " (values)"] = json.dumps(pq.read_table(path).to_pylist(), default=str)
    for kind in (
        "model/",
        "pred/",
        "metrics.json",
        "inspect/",
        "suggest/",
        "crawl-docs/",
        "crawl-docs_rejects/",
        "exp/",
    ):
        assert any(p.startswith(kind) for p in written), (kind, sorted(written)[:50])
    assert any(p.startswith("exp/") and p.endswith("results.csv") for p in written)
    assert any("/." in p or p.startswith(".") for p in written)  # hidden files (markers, leases) were read too
    leaks = sorted({(where, s[:6]) for where, text in texts.items() for s in all_secrets if s in text})
    assert not leaks, leaks
