"""Record RabbitMQ's management API replies for `mgmt_scenario` (run by hand, not by pytest).

    .venv/bin/python tests/integration/data/record_rabbitmq_mgmt.py \
        http://guest:guest@127.0.0.1:15672 amqp://guest:guest@127.0.0.1:5672/

writes ``rabbitmq-3.10.8-mgmt.json`` beside this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mgmt_scenario

OUTPUT = Path(__file__).with_name("rabbitmq-3.10.8-mgmt.json")


def main() -> None:
    management_url, amqp_url = sys.argv[1], sys.argv[2]
    parts = urlsplit(management_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
    steps = mgmt_scenario.run(
        base,
        unquote(parts.username or "guest"),
        unquote(parts.password or "guest"),
        amqp_url,
        "rec",
    )
    document = {
        "broker": "RabbitMQ 3.10.8 (Debian package, management plugin, guest/guest)",
        "steps": [step.as_json() for step in steps],
    }
    OUTPUT.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(steps)} steps written to {OUTPUT}")


if __name__ == "__main__":
    main()
