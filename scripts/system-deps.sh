#!/usr/bin/env bash
# Installs the Debian packages the tests and benchmarks use as real peers, if any
# is missing: curl (HTTP/1.1 and HTTP/2 client), openssl (s_client/s_server),
# nghttp2-client (h2load), dnsmasq (DNS server), redis-server (global rate limit).
# Quick no-op when everything is present. Needs root (CI and dev machines are).
set -u
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "${1:-}" = "--bench" ]; then
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: missing ${need[*]} and cannot install them here (need root and apt-get); tests that use them will be skipped" >&2
  exit 0
fi
echo "system-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
  echo "system-deps: apt-get install ${need[*]} failed; tests that need them will be skipped" >&2
}
# Debian starts redis-server as a service on install; the tests start their own on loopback ports.
(command -v systemctl >/dev/null 2>&1 && systemctl stop redis-server >/dev/null 2>&1) || true
exit 0
