"""The shipped alert rules (examples/monitoring/alerts.yml) against series as the monitor writes them, with
promtool's rule tests: a silent cut alerts by default (issue 36 §7)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ALERTS = Path(__file__).parents[2] / "examples" / "monitoring" / "alerts.yml"
PROMTOOL = shutil.which("promtool")


def rule(name: str) -> dict[str, Any]:
    rules = [r for group in yaml.safe_load(ALERTS.read_text())["groups"] for r in group["rules"]]
    (found,) = [r for r in rules if r.get("alert") == name]
    assert isinstance(found, dict)
    return found


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian's prometheus package)")
def test_a_stream_cut_silently_alerts_on_its_route_only(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    annotations = rule("TokenpathStreamsCutSilently")["annotations"]
    summary = annotations["summary"].replace("{{ $labels.target }}", "edge").replace("{{ $labels.route }}", "via")
    series = 'tokenpath_monitor_stream_ends_total{target="edge", route="%s", end="%s"}'
    test = {
        "rule_files": ["alerts.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": series % ("via", "cut_silent"), "values": "0 0 1 1 1"},
                    {"series": series % ("direct", "cut_silent"), "values": "0 0 0 0 0"},
                    {"series": series % ("direct", "complete"), "values": "0 1 2 3 4"},
                ],
                "alert_rule_test": [
                    {"eval_time": "1m", "alertname": "TokenpathStreamsCutSilently", "exp_alerts": []},
                    {
                        "eval_time": "4m",
                        "alertname": "TokenpathStreamsCutSilently",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical", "target": "edge", "route": "via"},
                                "exp_annotations": {"summary": summary, "description": annotations["description"]},
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(json.dumps(test))  # JSON is YAML
    done = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_silent_cut_alert_reads_the_monitor_s_own_series() -> None:
    expr = rule("TokenpathStreamsCutSilently")["expr"]
    assert 'tokenpath_monitor_stream_ends_total{end="cut_silent"}' in expr  # monitor/metrics.py MonitorMetrics.ends
