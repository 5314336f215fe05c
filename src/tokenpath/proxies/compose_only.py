"""Proxies with no Debian package on this machine: their stock configs ship for the Docker export only."""

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


HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


class Envoy(Proxy):
    name = "envoy"
    runnable = False
    container_config = "/etc/envoy/envoy.yaml"  # where the image looks by default
    image = "envoyproxy/envoy:v1.31.0"
    variants = (STOCK,)

    def write_config(self, site: Site) -> Path:
        up = site.upstream
        config = site.workdir / "envoy.yaml"
        config.write_text(f"""# tokenpath: stock reverse proxy
static_resources:
  listeners:
    - address: {{socket_address: {{address: 0.0.0.0, port_value: {site.listen.port}}}}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": {HCM}
                stat_prefix: tokenpath
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes: [{{match: {{prefix: "/"}}, route: {{cluster: upstream, timeout: 0s}}}}]
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config: {{"@type": {ROUTER}}}
  clusters:
    - name: upstream
      type: STRICT_DNS
      load_assignment:
        cluster_name: upstream
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address: {{socket_address: {{address: {up.host}, port_value: {up.port}}}}}
""")
        return config
