"""`python -m reward_gateway`: read the environment and serve."""

from __future__ import annotations

import sys

from reward_gateway.config import ConfigError, load_config


def main() -> int:
    try:
        config = load_config()
    except ConfigError as error:
        print(f"reward-gateway: {error}", file=sys.stderr)
        return 2
    from reward_gateway.server import serve  # kserve is heavy; import it only to serve

    serve(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
