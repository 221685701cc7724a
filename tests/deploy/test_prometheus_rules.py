"""deploy/prometheus through Prometheus's own tool: `promtool check config` (the docker-compose
configuration, rule files included), `promtool check rules`, and `promtool test rules` on the unit
tests in alerts_test.yml, which must cover every alert."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.deploy.deploy_files import PROMETHEUS, prometheus_tool


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prometheus_tool("promtool"), *args],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_promtool_accepts_the_prometheus_config() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


def test_promtool_accepts_the_alert_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_unit_tests_pass() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() -> None:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    fired = {case["alertname"] for case in cases if case.get("exp_alerts")}
    silent = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    assert sorted(alerts - fired) == []
    assert sorted(alerts - silent) == []


def test_promtool_rejects_a_rule_that_does_not_parse(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: sum(rate(x[5m])\n")
    result = promtool("check", "rules", str(broken))
    assert result.returncode != 0
