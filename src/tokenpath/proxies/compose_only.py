"""Proxies with no package this machine can install: their stock configs ship for the Docker export only."""

from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site


class Traefik(Proxy):
    name = "traefik"
    runnable = False
    container_config = "/etc/traefik/traefik.yml"  # where the image looks by default
    image = "traefik:v3.1.2"
    variants = (STOCK,)

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "traefik.yml"
        config.write_text(f"""# tokenpath: stock reverse proxy (file provider)
entryPoints:
  web:
    address: ":{site.listen.port}"
providers:
  file:
    filename: /etc/traefik/traefik.yml
http:
  routers:
    all:
      rule: "PathPrefix(`/`)"
      service: upstream
  services:
    upstream:
      loadBalancer:
        servers:
          - url: "http://{site.upstream.hostport}"
""")
        return config
