// nginx as the benchmark's upstream ("origin") and as the comparison reverse
// proxy. Both run in the foreground (`daemon off`) with one worker, listen on
// 127.0.0.1 only, and keep pid, logs and temp files in the bench's temp dir.
// Installed from Debian by `bash scripts/system-deps.sh --bench` (nginx-light).

import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { spawnSync } from 'node:child_process'
import path from 'node:path'
import { pinned, startProc, stopProc, waitForHttp, tailOf } from './procs.ts'
import type { Proc } from './procs.ts'

export const SMALL_BODY = 'hello from the bench origin\n'
export const ONE_MIB = 1024 * 1024

export function findNginx(): string | null {
  for (const p of ['/usr/sbin/nginx', '/usr/bin/nginx']) if (existsSync(p)) return p
  const r = spawnSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' })
  const found = r.stdout.trim()
  return r.status === 0 && found !== '' ? found : null
}

/** Ports of the origin: h1 (HTTP/1.1) and h2c (prior knowledge) on separate ports. */
export interface OriginPorts { readonly h1: number; readonly h2c: number }
export interface ProxyPorts { readonly h1: number; readonly h2c: number }

function commonHead(dir: string, name: string): string {
  const tmp = path.join(dir, `${name}-tmp`)
  mkdirSync(tmp, { recursive: true })
  return `daemon off;
worker_processes 1;
pid ${path.join(dir, `${name}.pid`)};
error_log ${path.join(dir, `${name}-error.log`)} warn;
events { worker_connections 8192; }
`
}

function tempPaths(dir: string, name: string): string {
  const tmp = path.join(dir, `${name}-tmp`)
  return `  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  client_max_body_size 0;
`
}

/**
 * The origin: a small static file (/small), a 1 MiB static file (/1m) and an
 * upload sink (/upload: reads and discards the body, answers 200).
 */
export function writeOriginConfig(dir: string, ports: OriginPorts): string {
  const www = path.join(dir, 'www')
  mkdirSync(www, { recursive: true })
  // nginx workers drop to an unprivileged user when started as root: let them read.
  chmodSync(dir, 0o755)
  chmodSync(www, 0o755)
  writeFileSync(path.join(www, 'small'), SMALL_BODY)
  writeFileSync(path.join(www, '1m'), Buffer.alloc(ONE_MIB, 0x61))
  const conf = `${commonHead(dir, 'origin')}
http {
  access_log off;
${tempPaths(dir, 'origin')}
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  upstream self {
    server 127.0.0.1:${ports.h1};
    keepalive 16;
  }
  server {
    listen 127.0.0.1:${ports.h1} backlog=4096;
    listen 127.0.0.1:${ports.h2c} http2 backlog=4096;
    root ${www};
    location = /healthz { return 200 "ok\\n"; }
    # Connection counters: how many connections each proxy opened to the origin in a run.
    location = /nginx_status { stub_status; }
    # Read the whole body (in memory) before answering: \`return\` alone would answer
    # first and discard the body, which breaks keep-alive through a streaming proxy.
    location = /upload {
      client_body_buffer_size 2m;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://self/healthz;
    }
    location / { }
  }
}
`
  const file = path.join(dir, 'origin.conf')
  writeFileSync(file, conf)
  return file
}

/**
 * The comparison: nginx as a reverse proxy, one worker, HTTP/1.1 keep-alive to
 * the origin, access log on (unbuffered, nginx's default) like sallyport's.
 * proxy_max_temp_file_size 0: stream large bodies through memory buffers, never disk.
 */
export function writeProxyConfig(dir: string, ports: ProxyPorts, origin: OriginPorts): string {
  const conf = `${commonHead(dir, 'proxy')}
http {
  access_log ${path.join(dir, 'proxy-access.log')} combined;
${tempPaths(dir, 'proxy')}
  upstream origin {
    server 127.0.0.1:${origin.h1};
    keepalive 128;
  }
  server {
    listen 127.0.0.1:${ports.h1} backlog=4096;
    listen 127.0.0.1:${ports.h2c} http2 backlog=4096;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_request_buffering off;
      proxy_max_temp_file_size 0;
    }
  }
}
`
  const file = path.join(dir, 'proxy.conf')
  writeFileSync(file, conf)
  return file
}

export async function startNginx(nginx: string, name: string, conf: string, dir: string, port: number, cores: string | null): Promise<Proc> {
  const proc = startProc(name, pinned(cores, [nginx, '-c', conf, '-p', dir, '-e', path.join(dir, `${name}-error.log`)]), path.join(dir, `${name}.out`))
  const ok = await waitForHttp(port, '/small', 10_000, proc)
  if (!ok) {
    await stopProc(proc)
    throw new Error(`${name} nginx did not start: ${tailOf(path.join(dir, `${name}-error.log`))}${tailOf(proc.logPath)}`)
  }
  return proc
}

/** nginx stub_status "accepts" counter of the server on `port` (connections accepted so far); null if unreadable. */
export async function acceptedConnections(port: number): Promise<number | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/nginx_status`, { signal: AbortSignal.timeout(2000) })
    const text = await res.text()
    const m = /\n\s*(\d+)\s+(\d+)\s+(\d+)/.exec(text)
    return m === null ? null : Number(m[1])
  } catch {
    return null
  }
}
