"""The Kubernetes manifests in deploy/kubernetes/: well-formed objects that name only the
metrics the worker really exports, the port it really serves them on, and options its
command line really has."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric

import tickwork.metrics  # registers the node's counters, gauges and histograms
from tickwork import App
from tickwork.cli import main
from tickwork.cli import worker as cli  # the worker command's module: load_app, watch_queue, serve_metrics

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
MANIFESTS = ["worker-deployment.yaml", "hpa.yaml", "prometheus-adapter-rules.yaml", "keda-scaledobject.yaml"]
QUEUE_GAUGES = {"tickwork_queue_depth", "tickwork_queue_oldest_age_seconds"}
METRIC_NAME = re.compile(r"\btickwork_[a-z0-9_]+\b")
# The series a family is exposed as (what PromQL names): a counter "x" is scraped as x_total.
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("_sum", "_count"),
    "info": ("_info",),
}


def documents() -> list[tuple[str, Any]]:
    """Every YAML document of every manifest, with its file name (empty documents skipped,
    as kubectl skips them)."""
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")) + sorted(DEPLOY.glob("*.yml")):
        with path.open(encoding="utf-8") as f:
            found += [(path.name, doc) for doc in yaml.safe_load_all(f) if doc is not None]
    return found


def only(kind: str) -> dict[str, Any]:
    objects = [doc for _, doc in documents() if doc.get("kind") == kind]
    assert len(objects) == 1, f"expected one {kind} in {DEPLOY}, found {len(objects)}"
    return objects[0]


def series_names(families: Iterable[Metric]) -> set[str]:
    names: set[str] = set()
    for family in families:
        if family.name.startswith("tickwork_"):
            names |= {family.name + suffix for suffix in SERIES_SUFFIXES.get(family.type, ("",))}
    return names


def metrics_in(query: str) -> set[str]:
    return set(METRIC_NAME.findall(query))


def worker_container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "one container, the worker"
    container: dict[str, Any] = containers[0]
    return container


def command_line(container: dict[str, Any]) -> list[str]:
    return [str(arg) for arg in container.get("command", []) + container.get("args", [])]


def option_value(argv: list[str], option: str) -> str:
    for i, arg in enumerate(argv):
        if arg == option:
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{option} missing from {argv}")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Series names a worker's /metrics really has: the node's own metrics from the default
    registry, plus the queue gauges computed from a real store."""
    assert tickwork.metrics.REGISTRY is REGISTRY  # the registry /metrics serves
    names = series_names(REGISTRY.collect())
    app = App(f"sqlite:///{tmp_path_factory.mktemp('metrics')}/t.db")  # the store is created on first use
    try:
        names |= series_names(tickwork.metrics.QueueCollector(lambda: app.store).collect())
    finally:
        app.close()
    assert names >= QUEUE_GAUGES, f"the queue collector exported no queue gauges: {sorted(names)}"
    assert "tickwork_task_runs_total" in names  # a counter, under its scraped name
    return names


def test_every_manifest_is_a_kubernetes_object() -> None:
    assert sorted(p.name for p in DEPLOY.glob("*.yaml")) == sorted(MANIFESTS)
    found = documents()
    assert found
    seen = set()
    for name, doc in found:
        assert isinstance(doc, dict), f"{name}: a document is not a mapping: {doc!r}"
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"], f"{name}: no apiVersion"
        assert isinstance(doc.get("kind"), str) and doc["kind"], f"{name}: no kind"
        assert isinstance(doc.get("metadata"), dict), f"{name}: no metadata"
        assert isinstance(doc["metadata"].get("name"), str) and doc["metadata"]["name"], f"{name}: no metadata.name"
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{name}: {key} defined twice"
        seen.add(key)


def test_the_hpa_and_the_adapter_rules_name_only_exported_metrics(exported: set[str]) -> None:
    hpa = only("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert all(metric["type"] == "External" for metric in hpa["spec"]["metrics"])
    wanted = {metric["external"]["metric"]["name"] for metric in hpa["spec"]["metrics"]}
    assert wanted == QUEUE_GAUGES
    assert wanted <= exported

    config = yaml.safe_load(only("ConfigMap")["data"]["config.yaml"])
    served = set()
    for rule in config["externalRules"]:
        used = metrics_in(rule["seriesQuery"]) | metrics_in(rule["name"]["matches"]) | {rule["name"]["as"]}
        assert used <= exported, f"adapter rule names metrics the worker does not export: {sorted(used - exported)}"
        # Every replica reports the same queue value: summing would multiply it by the replica count.
        assert rule["metricsQuery"].startswith("max("), rule["metricsQuery"]
        served.add(rule["name"]["as"])
    assert wanted <= served, f"the HPA asks the adapter for metrics it does not serve: {sorted(wanted - served)}"


def test_the_keda_triggers_query_only_exported_metrics(exported: set[str]) -> None:
    scaled = only("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    queries = [t["metadata"]["query"] for t in scaled["spec"]["triggers"] if t["type"] == "prometheus"]
    assert len(queries) == len(scaled["spec"]["triggers"]) == 2
    used = set()
    for query in queries:
        names = metrics_in(query)
        assert names, f"a trigger queries no tickwork metric: {query}"
        assert names <= exported, f"a KEDA query names metrics the worker does not export: {sorted(names - exported)}"
        assert query.startswith("max("), query
        used |= names
    assert used == QUEUE_GAUGES
    for trigger in scaled["spec"]["triggers"]:
        float(trigger["metadata"]["threshold"])  # KEDA wants a number, as a string
    # The workers export the signal: with no replica nothing would report a backlog.
    assert 1 <= scaled["spec"]["minReplicaCount"] < scaled["spec"]["maxReplicaCount"]


def test_both_autoscalers_scale_the_worker_deployment_which_leaves_replicas_to_them() -> None:
    deployment = only("Deployment")
    assert "replicas" not in deployment["spec"], "kubectl apply would reset the autoscaled replica count"
    hpa, scaled = only("HorizontalPodAutoscaler"), only("ScaledObject")
    for target in (hpa["spec"]["scaleTargetRef"], scaled["spec"]["scaleTargetRef"]):
        assert target["kind"] == "Deployment"
        assert target["name"] == deployment["metadata"]["name"]
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] > 0


def test_the_metrics_port_agrees_across_command_container_annotations_probes_and_service() -> None:
    deployment = only("Deployment")
    container = worker_container(deployment)
    port = int(option_value(command_line(container), "--metrics-port"))
    named = [p for p in container["ports"] if p.get("name") == "metrics"]
    assert len(named) == 1 and named[0]["containerPort"] == port

    template = deployment["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations.get("prometheus.io/path", "/metrics") == "/metrics"

    for probe in ("readinessProbe", "livenessProbe"):
        check = container[probe].get("httpGet") or container[probe].get("tcpSocket")
        assert check is not None and check["port"] in ("metrics", port), f"{probe} checks another port"
        assert container[probe].get("httpGet", {}).get("path", "/metrics") == "/metrics"

    service = only("Service")
    labels = template["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items(), "the Service selects no worker pod"
    assert [p.get("targetPort") for p in service["spec"]["ports"]] in (["metrics"], [port])

    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["TICKWORK_DB"]["valueFrom"], "the database URL comes from a Secret"


def test_termination_grace_outlasts_the_shutdown_grace() -> None:
    shutdown_grace = inspect.signature(App).parameters["shutdown_grace"].default
    grace = only("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > max(30.0, shutdown_grace), "SIGKILL would cut the graceful shutdown short"


def test_the_worker_command_line_accepts_the_deployment_options() -> None:
    argv = command_line(worker_container(only("Deployment")))
    assert argv[:2] == ["tickwork", "worker"]
    (script,) = entry_points(group="console_scripts", name="tickwork")
    assert script.value == "tickwork.cli:main"
    assert re.fullmatch(r"[\w.]+:\w+", argv[2]), f"APP is module:attribute, not {argv[2]!r}"

    result = CliRunner().invoke(main, ["worker", "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    options = [arg.split("=", 1)[0] for arg in argv[3:] if arg.startswith("--")]
    assert {"--concurrency", "--metrics-port"} <= set(options)
    for option in options:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", result.output), f"worker has no {option}"


def test_the_worker_starts_with_the_deployment_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole command line parses, and means what the manifests assume: MIN,MAX slots,
    metrics on the named port and on every interface (Prometheus scrapes from another pod)."""
    argv = command_line(worker_container(only("Deployment")))
    calls: dict[str, Any] = {}

    class FakeApp:
        def run_worker(self, concurrency: int = 8, **kwargs: Any) -> None:
            calls["run_worker"] = {"concurrency": concurrency, **kwargs}

    def load_app(spec: str) -> FakeApp:
        calls["app"] = spec
        return FakeApp()

    monkeypatch.setattr(cli, "load_app", load_app)
    monkeypatch.setattr(cli, "watch_queue", lambda store, queues=(): calls.setdefault("watch_queue", list(queues)))
    monkeypatch.setattr(cli, "serve_metrics", lambda port, host: calls.setdefault("serve_metrics", (port, host)))
    result = CliRunner().invoke(main, argv[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output

    low, high = (int(n) for n in option_value(argv, "--concurrency").split(","))
    assert calls["app"] == argv[2]
    assert calls["run_worker"]["concurrency"] == low
    assert calls["run_worker"]["max_concurrency"] == high
    # The queue gauges are exported, not only the node's own metrics, with a series for the
    # worker group's queue, which is the one its autoscaler's selector reads.
    assert calls["watch_queue"] == calls["run_worker"]["queues"] == [option_value(argv, "--queues")]
    assert calls["serve_metrics"] == (int(option_value(argv, "--metrics-port")), "0.0.0.0")
