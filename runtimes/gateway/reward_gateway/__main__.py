"""`python -m reward_gateway`: read the environment (and KServe's arguments) and serve."""

from __future__ import annotations

import logging
import sys

from reward_gateway.config.gateway import ConfigError, load_config, parse_kserve_args

logger = logging.getLogger("reward_gateway")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kserve, unknown = parse_kserve_args(sys.argv[1:] if argv is None else argv)
    if unknown:
        # KServe may append arguments for its own servers (--protocol, say).
        logger.info("ignoring arguments the gateway does not take: %s", " ".join(unknown))
    if kserve.workers is not None and kserve.workers != 1:
        logger.info("--workers %d ignored: the gateway is one process; scale it with replicas", kserve.workers)
    try:
        config = load_config(kserve=kserve)
    except ConfigError as error:
        print(f"reward-gateway: {error}", file=sys.stderr)
        return 2
    from reward_gateway.http.server import serve  # the server's imports only when serving

    return serve(config)


if __name__ == "__main__":
    sys.exit(main())
