"""Static checks of the demo deployment in docker/ (no Docker engine: files are parsed, never run).

The compose file parses; every image is pinned (Dockerfile FROMs resolved through their ARGs); the
required services exist; depends_on targets and conditions hold; host ports do not collide; every
`scheme://service:port` URL names a port that service listens on; the Spark and AWS connections, the
S3 credentials and the DAGs' environment agree with the services; the provider install, the pyspark
and deltalake pins, the Python minor versions and the bundled Hadoop agree with pyproject.toml and
the installed pyspark; the Dockerfile follows hadolint-style rules and its dockerignore lets every
COPY source through; the README's commands name existing services and DAGs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKERIGNORE = DOCKER / "Dockerfile.dockerignore"
SPARK_DEFAULTS = DOCKER / "spark" / "spark-defaults.conf"
S3_CONFIG = DOCKER / "seaweedfs" / "s3.json"
README = DOCKER / "README.md"
DAGS = ROOT / "dags"
PYPROJECT = ROOT / "pyproject.toml"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
DAG_SERVICES = ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")  # parse or run DAG code
API_SERVER = "airflow-api-server"
SCHEDULER = "airflow-scheduler"
POSTGRES = "postgres"
SPARK_MASTER = "spark-master"
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
SPARK_CONNECT = "spark-connect"
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
S3_SERVICE = "seaweedfs"
SEED = "delta-seed"
REQUIRED_SERVICES = {*AIRFLOW_SERVICES, POSTGRES, SPARK_MASTER, *SPARK_WORKERS, SPARK_CONNECT, S3_SERVICE, SEED}
EXAMPLE_DAG_ID = "delta_table_health"
COMPOSE_CMD = "docker compose -f docker/docker-compose.yml"
UP_CMD = f"{COMPOSE_CMD} up -d --build"
TEST_CMD = f"{COMPOSE_CMD} exec {SCHEDULER} airflow dags test {EXAMPLE_DAG_ID}"

URL_RE = re.compile(r"\b([a-z][a-z0-9+.-]*)://(?:[^@/\s\"']*@)?([A-Za-z0-9_.-]+):(\d+)")
DAG_ENV_RE = re.compile(
    r"os\.(?:environ\.get|getenv)\(\s*[\"'](DELTA_\w+)[\"']|os\.environ\[\s*[\"'](DELTA_\w+)[\"']\s*\]"
)
CONN_ID_RE = re.compile(r"\b(?:conn_id|storage_conn_id|spark_conn_id|aws_conn_id)\s*=\s*[\"'](\w+)[\"']")
VAR_RE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
VERSION_TAG_RE = re.compile(r"\d+\.\d+")
DEPENDS_ON_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


# -- parsing helpers ----------------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str  # as written
    name: str | None
    line: int
    args: dict[str, str | None] = field(default_factory=dict)  # ARGs declared in the stage
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Dockerfile:
    global_args: dict[str, str | None]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise AssertionError(f"Dockerfile has no stage {name!r}")

    def resolve(self, text: str, stage: Stage | None = None, strict: bool = True) -> str:
        """Substitute ARG values (global defaults, then the stage's declarations) into `text`.

        `strict=False` leaves other variables alone (shell variables of a RUN)."""
        values = {k: v for k, v in self.global_args.items() if v is not None}
        for key, value in self.global_args.items():
            if value is not None:
                values[key] = self._subst(value, values)
        if stage is not None:
            scoped = {}
            for key, value in stage.args.items():
                scoped[key] = value if value is not None else values.get(key)
            values = {k: v for k, v in scoped.items() if v is not None}
        return self._subst(text, values, strict)

    @staticmethod
    def _subst(text: str, values: dict[str, str], strict: bool = True) -> str:
        def repl(m: re.Match[str]) -> str:
            name = m.group(1) or m.group(2)
            if name not in values:
                if not strict:
                    return m.group(0)
                raise AssertionError(f"Dockerfile: ${name} has no ARG value (in {text!r})")
            return values[name]

        return VAR_RE.sub(repl, text)

    def base_image(self, stage: Stage) -> str:
        return self.resolve(stage.base)

    def stage_names(self) -> set[str]:
        return {s.name for s in self.stages if s.name}


def parse_dockerfile(path: Path) -> Dockerfile:
    logical: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue  # comments (also inside continuations, as Docker drops them) and blank lines
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        logical.append((start, buf + stripped))
        buf = ""
    assert not buf, f"{path}: dangling line continuation"

    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line, text in logical:
        keyword, _, args = text.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            parts = args.split()
            parts = [p for p in parts if not p.startswith("--platform")]
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name, line=line))
            continue
        if keyword == "ARG":
            key, eq, value = args.partition("=")
            target = stages[-1].args if stages else global_args
            target[key.strip()] = value.strip().strip('"') if eq else None
            if not stages:
                continue
        assert stages or keyword == "ARG", f"{path}:{line}: {keyword} before the first FROM"
        stages[-1].instructions.append(Instruction(keyword, args, line))
    return Dockerfile(global_args, stages)


def is_pinned(ref: str) -> bool:
    """An image reference with a digest, or a tag that carries a version (`x.y...`), never `latest`."""
    if "@sha256:" in ref:
        return True
    name_tag = ref.rsplit("/", 1)[-1]
    if ":" not in name_tag:
        return False
    tag = name_tag.split(":", 1)[1]
    return tag != "latest" and bool(VERSION_TAG_RE.search(tag))


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def flag_value(command: list[str], flag: str) -> str | None:
    """`--flag value`, `--flag=value` or `-flag=value` in an argv."""
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def host_ports(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host ip, host port, container port) of each published port."""
    out = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                out.append((str(entry.get("host_ip", "")), int(entry["published"]), int(entry["target"])))
            continue
        spec = str(entry).split("/", 1)[0]
        parts = spec.rsplit(":", 2)
        if len(parts) == 1:
            continue  # container port only: the engine picks a free host port
        ip = parts[0] if len(parts) == 3 else ""
        out.append((ip, int(parts[-2]), int(parts[-1])))
    return out


def listening_ports(service: dict[str, Any]) -> set[int]:
    ports = {int(str(p).split("/", 1)[0]) for p in service.get("expose") or []}
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).split("/", 1)[0].rsplit(":", 1)[-1]))
    return ports


def volume_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each volume: a path resolved against docker/, or a named volume."""
    out = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            source, target = str(entry.get("source", "")), str(entry["target"])
        else:
            source, target = str(entry).split(":")[:2]
        if source.startswith((".", "/")):
            source = str((DOCKER / source).resolve())
        out.append((source, target))
    return out


def parse_conn(env: dict[str, str], conn_id: str) -> dict[str, Any]:
    key = f"AIRFLOW_CONN_{conn_id.upper()}"
    assert key in env, f"{key} is not set"
    raw = env[key]
    assert raw.lstrip().startswith("{"), f"{key} should be JSON (no URI escaping): {raw!r}"
    conn = json.loads(raw)
    assert isinstance(conn, dict), key
    return conn


def spark_defaults() -> dict[str, str]:
    conf = {}
    for raw in SPARK_DEFAULTS.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            conf[key] = value.strip()
    return conf


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line[1:].strip() if negated else line
        pattern = pattern.strip("/")
        rx, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif pattern[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif pattern[i] == "?":
                rx, i = rx + "[^/]", i + 1
            else:
                rx, i = rx + re.escape(pattern[i]), i + 1
        patterns.append((negated, re.compile(rx)))
    return patterns


def is_ignored(relative: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories decides."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for negated, rx in patterns:
        if any(rx.fullmatch(p) for p in prefixes):
            ignored = not negated
    return ignored


def pip_requirements(run: str) -> list[list[str]]:
    """The requirement arguments of each `pip install` in a RUN (options and their values dropped)."""
    takes_value = {"-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--extra-index-url", "-t"}
    out = []
    for segment in re.split(r"&&|;|\|\|", run):
        m = re.search(r"\bpip3?\s+install\b(.*)", segment)
        if not m:
            continue
        tokens, reqs, skip = shlex.split(m.group(1)), [], False
        for token in tokens:
            if skip:
                skip = False
            elif token in takes_value:
                skip = True
            elif not token.startswith("-"):
                reqs.append(token)
        out.append(reqs)
    return out


def dag_sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted(DAGS.glob("*.py"))}


def pyproject_pin(requirements: list[str], name: str) -> str:
    for text in requirements:
        req = Requirement(text)
        if req.name == name:
            pins = [s.version for s in req.specifier if s.operator == "=="]
            assert pins, f"pyproject.toml: {text!r} is not pinned with =="
            return pins[0]
    raise AssertionError(f"pyproject.toml: no {name} requirement")


# -- fixtures -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), "compose file has no services"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE)


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


@pytest.fixture(scope="module")
def s3_identity() -> tuple[str, str]:
    identities = json.loads(S3_CONFIG.read_text())["identities"]
    assert len(identities) == 1 and len(identities[0]["credentials"]) == 1, "one demo identity expected"
    cred = identities[0]["credentials"][0]
    assert {"Read", "Write", "List"} <= set(identities[0]["actions"]) or "Admin" in identities[0]["actions"]
    return cred["accessKey"], cred["secretKey"]


# -- compose structure ----------------------------------------------------------------------------------


def test_required_services_present(services):
    missing = REQUIRED_SERVICES - set(services)
    assert not missing, f"missing services: {sorted(missing)}"


def test_every_image_is_pinned(services, dockerfile, pyproject):
    stages = dockerfile.stage_names()
    for name, service in services.items():
        build = service.get("build")
        if build is None:
            assert "image" in service, f"{name}: neither image nor build"
            assert is_pinned(service["image"]), f"{name}: image {service['image']!r} is not pinned to a version"
            continue
        context = (DOCKER / build.get("context", ".")).resolve()
        assert context == ROOT, f"{name}: build context should be the repository root, is {context}"
        assert (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE, name
        assert build.get("target") in stages, f"{name}: build target {build.get('target')!r} is not a stage"
        # A built image gets a local name tagged with the project's version (never pulled).
        image = service.get("image", "")
        assert image.endswith(":" + pyproject["project"]["version"]), f"{name}: image {image!r}"
    for stage in dockerfile.stages:
        base = dockerfile.base_image(stage)
        assert base in stages or is_pinned(base), f"Dockerfile:{stage.line}: FROM {base} is not pinned"
        for ins in stage.instructions:
            m = re.search(r"--from=(\S+)", ins.args) if ins.keyword == "COPY" else None
            if m:
                ref = dockerfile.resolve(m.group(1), stage)
                assert ref in stages or is_pinned(ref), f"Dockerfile:{ins.line}: COPY --from={ref} is not pinned"


def test_services_use_the_right_build_targets(services):
    for name in AIRFLOW_SERVICES:
        assert services[name]["build"]["target"] == "airflow", name
    for name in (SPARK_MASTER, *SPARK_WORKERS, SPARK_CONNECT):
        assert services[name]["build"]["target"] == "spark", name
    assert services[SEED]["build"]["target"] == "seed"


def test_depends_on_targets_exist_and_conditions_hold(services):
    graph: dict[str, list[str]] = {}
    for name, service in services.items():
        deps = service.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        graph[name] = list(deps)
        for target, spec in deps.items():
            assert target in services, f"{name} depends on unknown service {target!r}"
            condition = (spec or {}).get("condition", "service_started")
            assert condition in DEPENDS_ON_CONDITIONS, f"{name} -> {target}: condition {condition!r}"
            if condition == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target} healthy; no healthcheck"
            if condition == "service_completed_successfully":
                assert services[target].get("restart", "no") == "no", f"{target} is one-shot: restart must be 'no'"

    state: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert state.get(node) != 1, f"depends_on cycle: {' -> '.join((*path, node))}"
        if state.get(node) == 2:
            return
        state[node] = 1
        for nxt in graph[node]:
            visit(nxt, (*path, node))
        state[node] = 2

    for node in graph:
        visit(node, ())


def test_startup_order(services):
    scheduler_deps = services[SCHEDULER]["depends_on"]
    assert scheduler_deps["airflow-init"]["condition"] == "service_completed_successfully"
    assert scheduler_deps[SEED]["condition"] == "service_completed_successfully"
    assert SPARK_MASTER in scheduler_deps and API_SERVER in scheduler_deps
    for name in AIRFLOW_SERVICES:
        assert services[name]["depends_on"][POSTGRES]["condition"] == "service_healthy", name
    for name in SPARK_WORKERS:
        assert SPARK_MASTER in services[name]["depends_on"], name
    assert services[SEED]["depends_on"][S3_SERVICE]["condition"] == "service_healthy"


def test_no_host_port_collisions(services):
    seen: dict[tuple[str, int], str] = {}
    for name, service in services.items():
        for ip, host, container in host_ports(service):
            for key in {(ip, host), ("", host)} if ip else {("", host)}:
                assert key not in seen, f"host port {host} published by both {seen[key]} and {name}"
            seen[(ip, host)] = name
            assert container in listening_ports(service), f"{name}: publishes {container}, not exposed"
    assert ("", 8080) in seen and seen[("", 8080)] == API_SERVER, "the UI should be on host port 8080"


def test_exposed_ports_match_what_services_listen_on(services):
    """`expose` is what the URL check trusts: it must agree with each service's own configuration."""
    postgres = services[POSTGRES]
    assert int(env_of(postgres).get("PGPORT", 5432)) in listening_ports(postgres)
    s3 = services[S3_SERVICE]
    assert int(flag_value(command_of(s3), "-s3.port") or 8333) in listening_ports(s3)
    master = services[SPARK_MASTER]
    assert int(flag_value(command_of(master), "--port") or 7077) in listening_ports(master)
    assert int(flag_value(command_of(master), "--webui-port") or 8080) in listening_ports(master)
    for name in SPARK_WORKERS:
        worker = services[name]
        assert int(flag_value(command_of(worker), "--webui-port") or 8081) in listening_ports(worker), name
    api = services[API_SERVER]
    assert int(env_of(api).get("AIRFLOW__API__PORT", 8080)) in listening_ports(api)


def test_urls_name_ports_the_services_listen_on(services):
    texts: list[tuple[str, str]] = []
    for name, service in services.items():
        texts += [(f"{name}.environment.{k}", v) for k, v in env_of(service).items()]
        texts += [(f"{name}.command", " ".join(command_of(service)))]
    texts += [(f"spark-defaults.conf {k}", v) for k, v in spark_defaults().items()]
    checked: set[tuple[str, int]] = set()
    for where, text in texts:
        for scheme, host, port in URL_RE.findall(text):
            if host in services:
                assert int(port) in listening_ports(services[host]), (
                    f"{where}: {scheme}://{host}:{port} but {host} listens on {sorted(listening_ports(services[host]))}"
                )
                checked.add((host, int(port)))
    assert {host for host, _ in checked} >= {POSTGRES, SPARK_MASTER, S3_SERVICE, API_SERVER}, checked


# -- Airflow ---------------------------------------------------------------------------------------------


def test_airflow_settings(services):
    postgres_env = env_of(services[POSTGRES])
    shared: dict[str, str] | None = None
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false", name
        url = urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert url.scheme.startswith("postgresql") and url.hostname == POSTGRES, name
        assert (url.username, url.password, url.path.lstrip("/")) == (
            postgres_env["POSTGRES_USER"],
            postgres_env["POSTGRES_PASSWORD"],
            postgres_env["POSTGRES_DB"],
        ), f"{name}: SQLAlchemy URL does not match the postgres service's credentials"
        api = urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
        assert api.hostname == API_SERVER and api.path.rstrip("/") == "/execution", name
        # Components must share the secrets that sign task tokens and log requests.
        keys = ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY")
        mine = {k: env.get(k) for k in keys}
        assert mine["AIRFLOW__API_AUTH__JWT_SECRET"], f"{name}: no JWT secret (each component would make its own)"
        shared = shared or mine
        assert mine == shared, f"{name}: secrets differ from the other Airflow services"
    commands = {name: command_of(services[name]) for name in AIRFLOW_SERVICES}
    assert commands == {
        "airflow-init": ["db", "migrate"],
        "airflow-api-server": ["api-server"],
        "airflow-scheduler": ["scheduler"],
        "airflow-dag-processor": ["dag-processor"],
        "airflow-triggerer": ["triggerer"],
    }
    assert services[POSTGRES]["image"].startswith("postgres:")


def test_dags_folder_is_the_repository_dags_mounted(services):
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        dags_folder = env.get("AIRFLOW__CORE__DAGS_FOLDER", "/opt/airflow/dags")
        mounts = dict((target, source) for source, target in volume_mounts(services[name]))
        assert mounts.get(dags_folder) == str(DAGS), f"{name}: {dags_folder} should mount {DAGS}, got {mounts}"


def test_spark_connection_points_at_the_master(services):
    master = services[SPARK_MASTER]
    master_port = int(flag_value(command_of(master), "--port") or 7077)
    master_host = flag_value(command_of(master), "--host") or SPARK_MASTER
    assert master_host == SPARK_MASTER
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        conn = parse_conn(env, env.get("DELTA_SPARK_CONN_ID", "spark_default"))
        assert conn["conn_type"] == "spark", name
        host = conn["host"]
        # SparkSubmitHook: a host with "://" is the master URL as is (a port field would be ignored).
        assert "://" in host and "port" not in conn, f"{name}: spark host should be a full master URL: {host!r}"
        url = urlsplit(host)
        assert (url.scheme, url.hostname, url.port) == ("spark", SPARK_MASTER, master_port), f"{name}: {host}"
        assert (conn.get("extra") or {}).get("deploy-mode", "client") == "client", name
    for name in SPARK_WORKERS:
        command = command_of(services[name])
        assert command[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"], name
        assert command[-1] == f"spark://{SPARK_MASTER}:{master_port}", f"{name}: master URL {command[-1]}"
    assert command_of(master)[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]


def test_spark_connect_server_runs_on_the_master_and_its_connection_points_at_it(services, dockerfile, monkeypatch):
    """The Connect server: pyspark's own connect jar (the pinned pyspark, the image's Python) submitted to
    the standalone master, listening where AIRFLOW_CONN_SPARK_CONNECT (conn type spark_connect) points,
    leaving a worker core to spark-submit jobs; the Spark provider's hook reads the connection as sc://."""
    pytest.importorskip("airflow")
    service = services[SPARK_CONNECT]
    command = command_of(service)
    master = services[SPARK_MASTER]
    master_url = f"spark://{SPARK_MASTER}:{int(flag_value(command_of(master), '--port') or 7077)}"
    assert command[0] == "spark-submit" and flag_value(command, "--master") == master_url
    assert flag_value(command, "--class") == CONNECT_SERVER_CLASS
    conf = dict(c.split("=", 1) for c in (command[i + 1] for i, a in enumerate(command) if a == "--conf"))
    port = int(conf.get("spark.connect.grpc.binding.port", 15002))
    assert port in listening_ports(service) and conf.get("spark.driver.host") == SPARK_CONNECT
    assert int(conf["spark.cores.max"]) < len(SPARK_WORKERS), "spark-submit jobs need a core too"
    pyspark = dockerfile.resolve("${PYSPARK_VERSION}")
    python = re.fullmatch(r"python:(\d+\.\d+)\.\d+-[\w.-]+", dockerfile.base_image(dockerfile.stage("spark")))
    assert python and command[-1] == (
        f"/usr/local/lib/python{python.group(1)}/site-packages/pyspark/jars/spark-connect_2.13-{pyspark}.jar"
    )
    assert service["depends_on"][SPARK_MASTER]["condition"] == "service_healthy" and service.get("healthcheck")
    assert env_of(service).get("SPARK_LOCAL_HOSTNAME") == SPARK_CONNECT == service.get("hostname")
    assert env_of(service)["AWS_ENDPOINT_URL"] == env_of(services[SCHEDULER])["AWS_ENDPOINT_URL"]
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        conn = parse_conn(env, "spark_connect")
        assert conn["conn_type"] == "spark_connect" and "password" not in conn, name
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT", env["AIRFLOW_CONN_SPARK_CONNECT"])
        assert SparkConnectHook("spark_connect").get_connection_url() == f"sc://{SPARK_CONNECT}:{port}/", name


def test_spark_driver_and_workers_advertise_resolvable_names(services):
    scheduler = services[SCHEDULER]
    assert env_of(scheduler).get("SPARK_LOCAL_HOSTNAME") == SCHEDULER == scheduler.get("hostname", SCHEDULER)
    for name in (SPARK_MASTER, *SPARK_WORKERS):
        assert env_of(services[name]).get("SPARK_LOCAL_HOSTNAME") == name == services[name].get("hostname"), name


def test_aws_connection_points_at_the_store(services, s3_identity):
    s3_port = int(flag_value(command_of(services[S3_SERVICE]), "-s3.port") or 8333)
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        conn = parse_conn(env, env.get("DELTA_STORAGE_CONN_ID", "aws_default"))
        assert conn["conn_type"] == "aws", name
        assert (conn.get("login"), conn.get("password")) == s3_identity, f"{name}: aws conn credentials"
        extra = conn.get("extra") or {}
        endpoint = urlsplit(extra.get("endpoint_url", ""))
        assert (endpoint.scheme, endpoint.hostname, endpoint.port) == ("http", S3_SERVICE, s3_port), name
        assert extra.get("region_name") == env.get("AWS_REGION"), name


def test_s3_environment_matches_the_store(services, s3_identity):
    s3_port = int(flag_value(command_of(services[S3_SERVICE]), "-s3.port") or 8333)
    for name in (*AIRFLOW_SERVICES, *SPARK_WORKERS, SEED):
        env = env_of(services[name])
        assert (env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")) == s3_identity, name
        endpoint = urlsplit(env.get("AWS_ENDPOINT_URL", ""))
        assert (endpoint.hostname, endpoint.port) == (S3_SERVICE, s3_port), name
    mounts = dict(volume_mounts(services[S3_SERVICE]))
    assert str(S3_CONFIG) in mounts, "seaweedfs/s3.json is not mounted"
    assert flag_value(command_of(services[S3_SERVICE]), "-s3.config") == mounts[str(S3_CONFIG)]


def test_dag_environment_is_set(services):
    """The DELTA_* variables the DAG files read are set on every container that parses or runs them."""
    sources = dag_sources()
    if not sources:
        pytest.skip("dags/ has no .py files yet: nothing to match the compose environment against")
    names = {a or b for text in sources.values() for a, b in DAG_ENV_RE.findall(text)}
    assert names, "the DAGs read no DELTA_* variables: the regex or the contract changed"
    for name in DAG_SERVICES:
        env = env_of(services[name])
        missing = names - set(env)
        assert not missing, f"{name}: DAG variables not set: {sorted(missing)}"
        conn_ids = {m for text in sources.values() for m in CONN_ID_RE.findall(text)}
        for conn_id in conn_ids:
            parse_conn(env, conn_id)
    assert any(EXAMPLE_DAG_ID in text for text in sources.values()), f"no DAG file defines {EXAMPLE_DAG_ID}"


def test_dag_environment_values(services):
    """The contract's values, whether or not the DAGs exist yet."""
    seed_uri = env_of(services[SEED])["DELTA_EXAMPLE_TABLE_URI"]
    assert seed_uri.startswith("s3://"), seed_uri
    for name in DAG_SERVICES:
        env = env_of(services[name])
        assert env["DELTA_EXAMPLE_TABLE_URI"] == seed_uri, f"{name}: watches another table than the seed writes"
        parse_conn(env, env["DELTA_SPARK_CONN_ID"])
        parse_conn(env, env["DELTA_STORAGE_CONN_ID"])
        result_dir = env["DELTA_RESULT_DIR"]
        if result_dir.startswith("s3://"):
            assert urlsplit(result_dir).hostname == urlsplit(seed_uri).hostname, "results in another bucket"
            continue
        # A path: on a volume shared with the Spark workers (executors may write there in cluster mode).
        volumes = {t: s for s, t in volume_mounts(services[name])}
        shared = [t for t in volumes if result_dir == t or result_dir.startswith(t.rstrip("/") + "/")]
        assert shared, f"{name}: DELTA_RESULT_DIR {result_dir} is not on a mounted volume"
        for worker in SPARK_WORKERS:
            worker_volumes = {t: s for s, t in volume_mounts(services[worker])}
            assert worker_volumes.get(shared[0]) == volumes[shared[0]], f"{worker} does not share {shared[0]}"


# -- images ---------------------------------------------------------------------------------------------


def test_provider_installed_in_the_airflow_image(dockerfile, pyproject):
    stage = dockerfile.stage("airflow")
    copies = [dockerfile.resolve(i.args, stage).split() for i in stage.instructions if i.keyword == "COPY"]
    copied = {src: parts[-1] for parts in copies for src in parts[:-1] if not src.startswith("--")}
    provider_dir = "/opt/provider"
    assert copied.get("pyproject.toml", "").rstrip("/") == provider_dir
    assert copied.get("README.md", "").rstrip("/") == provider_dir, "pyproject's readme is needed to build"
    assert copied.get("airflow_delta_provider") == f"{provider_dir}/airflow_delta_provider"
    runs = [dockerfile.resolve(i.args, stage, strict=False) for i in stage.instructions if i.keyword == "RUN"]
    reqs = [r for run in runs for group in pip_requirements(run) for r in group]
    provider = [r for r in reqs if r.startswith(provider_dir)]
    assert provider, "the airflow stage does not pip install the provider"
    extras = set(re.fullmatch(rf"{provider_dir}\[([\w,]+)\]", provider[0]).group(1).split(","))
    assert {"airflow", "s3"} <= extras <= set(pyproject["project"]["optional-dependencies"]), extras
    airflow_pin = next(r for r in reqs if r.startswith("apache-airflow=="))
    airflow_version = airflow_pin.split("==", 1)[1]
    assert dockerfile.base_image(stage).startswith(f"apache/airflow:{airflow_version}-"), (
        "the image's Airflow and the pinned apache-airflow differ"
    )
    airflow_spec = next(
        Requirement(r).specifier
        for r in pyproject["project"]["optional-dependencies"]["airflow"]
        if Requirement(r).name == "apache-airflow"
    )
    assert Version(airflow_version) in airflow_spec, f"Airflow {airflow_version} outside pyproject's {airflow_spec}"
    entry_points = pyproject["project"].get("entry-points", {})
    if "apache_airflow_provider" in entry_points:
        target = next(iter(entry_points["apache_airflow_provider"].values()))
        module = target.split(":", 1)[0]
        assert (ROOT / Path(*module.split("."))).with_suffix(".py").exists(), f"entry point {target} missing"


def test_pip_installs_are_pinned_and_match_pyproject(dockerfile, pyproject):
    extras = pyproject["project"]["optional-dependencies"]
    pyspark = pyproject_pin(extras["airflow"], "pyspark")
    assert pyproject_pin(extras["airflow"], "pyspark-client") == pyspark, "pyspark and pyspark-client differ"
    deltalake = pyproject_pin(extras["test"], "deltalake")
    installed: dict[str, dict[str, str]] = {}
    for stage in dockerfile.stages:
        for ins in stage.instructions:
            if ins.keyword != "RUN":
                continue
            for group in pip_requirements(dockerfile.resolve(ins.args, stage, strict=False)):
                for req in group:
                    assert "$" not in req, f"Dockerfile:{ins.line}: {req!r} is not resolved by an ARG"
                    if req.startswith("/"):
                        continue  # the provider, from the build context
                    parsed = Requirement(req)
                    pins = [s.version for s in parsed.specifier if s.operator == "=="]
                    assert pins, f"Dockerfile:{ins.line}: {req!r} is not pinned"
                    installed.setdefault(stage.name or "", {})[parsed.name] = pins[0]
    assert installed["airflow"]["pyspark"] == installed["airflow"]["pyspark-client"] == pyspark
    assert installed["spark"] == {"pyspark": pyspark}, "workers get pyspark only"
    assert installed["seed"]["deltalake"] == deltalake


def test_python_minor_versions_match(dockerfile, pyproject):
    airflow_base = dockerfile.base_image(dockerfile.stage("airflow"))
    spark_base = dockerfile.base_image(dockerfile.stage("spark"))
    m_airflow = re.search(r"-python(\d+\.\d+)$", airflow_base)
    m_spark = re.fullmatch(r"python:(\d+\.\d+)\.\d+-[\w.-]+", spark_base)
    assert m_airflow and m_spark, (airflow_base, spark_base)
    assert m_airflow.group(1) == m_spark.group(1), "PySpark needs the same Python minor on driver and executors"
    assert Version(m_airflow.group(1)) in SpecifierSet(pyproject["project"]["requires-python"])
    assert dockerfile.base_image(dockerfile.stage("seed")) == spark_base


def test_java_17_in_driver_and_worker_images(dockerfile):
    java = dockerfile.base_image(dockerfile.stage("java"))
    assert re.match(r"eclipse-temurin:17\.", java), java
    for name in ("airflow", "spark"):
        stage = dockerfile.stage(name)
        copies = [i.args for i in stage.instructions if i.keyword == "COPY" and "--from=java" in i.args]
        assert copies, f"{name}: no JRE copied"
        env = " ".join(i.args for i in stage.instructions if i.keyword == "ENV")
        assert "JAVA_HOME=/opt/java/openjdk" in env and "/opt/java/openjdk/bin" in env, name


def test_s3a_jars_match_the_bundled_hadoop(dockerfile, pyproject):
    args = {k: dockerfile.resolve(f"${{{k}}}") for k in ("HADOOP_VERSION", "AWS_SDK_VERSION", "PYSPARK_VERSION")}
    for name in ("airflow", "spark"):
        stage = dockerfile.stage(name)
        runs = [i.args for i in stage.instructions if i.keyword == "RUN" and "install_s3a_jars.py" in i.args]
        assert runs, f"{name}: S3A jars are not installed"
        for flag, arg in (
            ("--hadoop", "HADOOP_VERSION"),
            ("--aws-sdk", "AWS_SDK_VERSION"),
            ("--analytics-accelerator", "ANALYTICS_ACCELERATOR_VERSION"),
        ):
            assert f'{flag} "${{{arg}}}"' in runs[0], f"{name}: {flag} is not ${arg}"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        pytest.skip("pyspark is not installed here: cannot read its bundled Hadoop version")
    pyspark_dir = Path(spec.origin).parent
    version = re.search(r"__version__[^=]*=\s*['\"]([^'\"]+)['\"]", (pyspark_dir / "version.py").read_text())
    if version is None or version.group(1) != args["PYSPARK_VERSION"]:
        pytest.skip(f"installed pyspark is not {args['PYSPARK_VERSION']}: its Hadoop says nothing about the image's")
    bundled = sorted(p.name for p in (pyspark_dir / "jars").glob("hadoop-client-api-*.jar"))
    assert bundled == [f"hadoop-client-api-{args['HADOOP_VERSION']}.jar"], (
        f"pyspark {args['PYSPARK_VERSION']} bundles {bundled}: HADOOP_VERSION (hadoop-aws) must match"
    )


def test_spark_defaults_configure_s3a_and_are_mounted(services, dockerfile):
    conf = spark_defaults()
    endpoint = urlsplit(conf["spark.hadoop.fs.s3a.endpoint"])
    assert endpoint.hostname == S3_SERVICE
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == str(endpoint.scheme == "https").lower()
    assert conf["spark.hadoop.fs.s3a.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("EnvironmentVariableCredentialsProvider")
    for name in (*AIRFLOW_SERVICES, SPARK_MASTER, *SPARK_WORKERS):
        target = services[name]["build"]["target"]
        stage = dockerfile.stage(target)
        env = " ".join(i.args for i in stage.instructions if i.keyword == "ENV")
        m = re.search(r"SPARK_CONF_DIR=(\S+)", env)
        assert m, f"stage {target}: SPARK_CONF_DIR not set"
        mounts = {t: s for s, t in volume_mounts(services[name])}
        assert mounts.get(f"{m.group(1)}/spark-defaults.conf") == str(SPARK_DEFAULTS), f"{name}: not mounted"


# -- Dockerfile hygiene ---------------------------------------------------------------------------------


def test_dockerfile_hadolint_style_rules(dockerfile):
    for stage in dockerfile.stages:
        has_pipefail = False
        for ins in stage.instructions:
            where = f"Dockerfile:{ins.line}"
            if ins.keyword == "SHELL":
                has_pipefail = "pipefail" in ins.args
            if ins.keyword == "ADD":
                assert "://" not in ins.args, f"{where}: ADD of a URL (download in a RUN and verify it)"
            if ins.keyword == "WORKDIR":
                assert ins.args.startswith("/"), f"{where}: relative WORKDIR"
            if ins.keyword != "RUN":
                continue
            run = ins.args
            assert "sudo " not in run, f"{where}: sudo"
            assert not re.search(r"\|\s*(ba)?sh\b", run), f"{where}: piping a download into a shell"
            if "apt-get install" in run:
                assert "--no-install-recommends" in run and re.search(r"\s-y\b|--yes", run), where
                assert "rm -rf /var/lib/apt/lists/*" in run, f"{where}: apt lists not cleaned in the same RUN"
            if re.search(r"\bapt-get\s+(upgrade|dist-upgrade)\b", run):
                raise AssertionError(f"{where}: apt-get upgrade in an image build")
            for segment in re.split(r"&&|;", run):
                if re.search(r"\bpip3?\s+install\b", segment):
                    assert "--no-cache-dir" in segment, f"{where}: pip install without --no-cache-dir"
            if re.search(r"(?<!\|)\|(?!\|)", run):
                assert has_pipefail, f"{where}: a pipe without SHELL [..., '-o', 'pipefail', ...]"
        users = [i.args for i in stage.instructions if i.keyword == "USER"]
        if stage.name != "java":
            assert users and users[-1] not in ("root", "0"), f"stage {stage.name}: runs as root"


def test_dockerignore_lets_every_copy_source_through(dockerfile):
    patterns = dockerignore_patterns()
    assert is_ignored(".venv/bin/python", patterns) and is_ignored(".git/HEAD", patterns), "context too big"
    for stage in dockerfile.stages:
        for ins in stage.instructions:
            if ins.keyword != "COPY" or "--from=" in ins.args:
                continue
            sources = [p for p in shlex.split(ins.args)[:-1] if not p.startswith("--")]
            for source in sources:
                path = ROOT / source
                assert path.exists(), f"Dockerfile:{ins.line}: COPY source {source} does not exist"
                files = [path] if path.is_file() else [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
                assert files, f"Dockerfile:{ins.line}: {source} holds no files"
                for file in files:
                    rel = file.relative_to(ROOT).as_posix()
                    assert not is_ignored(rel, patterns), f"{rel} is COPYed but Dockerfile.dockerignore drops it"


# -- README ---------------------------------------------------------------------------------------------


def test_readme_gives_the_two_commands(services):
    text = README.read_text()
    assert UP_CMD in text and TEST_CMD in text
    for m in re.finditer(rf"{re.escape(COMPOSE_CMD)}\s+(exec|run --rm)\s+([\w-]+)", text):
        assert m.group(2) in services, f"README names unknown service {m.group(2)!r}"
    runs = re.findall(r"airflow dags (?:test|trigger) (\w+)(?: -c '([^']*)')?", text)
    assert runs
    sources = dag_sources()
    for dag_id, conf in runs:
        params = json.loads(conf) if conf else {}
        assert isinstance(params, dict), conf
        if not sources:
            continue
        defining = [s for s in sources.values() if re.search(rf"dag_id\s*=\s*[\"']{dag_id}[\"']", s)]
        assert defining, f"README runs {dag_id}, no DAG file defines it"
        for key in params:
            assert re.search(rf"[\"']{key}[\"']\s*:\s*Param\(", defining[0]), f"{dag_id} has no param {key!r}"
