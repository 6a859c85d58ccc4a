// The real CLI under misbehaving clients and upstreams at once, for a bounded
// time: clients that abort uploads and downloads, reset connections with
// pipelined requests in flight, send half a head or garbage, cancel HTTP/2
// streams and drop sessions (plain and over TLS), cut TLS handshakes short and
// close WebSocket-shaped and CONNECT tunnels, while the configuration changes every second; upstreams that reset mid-body, end early, answer
// garbage, hang or 503 (on routes with retries, a mirror and body-buffering
// extensions). Afterwards the process is alive and serving, nothing crashed or
// threw unhandled, and no connection, stream or upstream request is left
// counted as active: nothing leaked. The random choices are seeded (a fixed
// seed by default; SALLYPORT_CHAOS_SEED, _ACTIONS, _HOSTS and _PATHS narrow or
// vary the mix when hunting a failure).
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import https from 'node:https'
import net from 'node:net'
import tls from 'node:tls'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, metricSum, routeYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'
import { createCa, serverCert } from '../helpers/pki.ts'

const RUN_MS = 6000
const WORKERS = 12
// Fixed by default (the same mix on every run); SALLYPORT_CHAOS_SEED=N tries others.
const SEED = Number(process.env.SALLYPORT_CHAOS_SEED ?? 20261126)

/** mulberry32: a small seeded PRNG. */
function rng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

const PATHS = ['/ok', '/ok', '/ok', '/big', '/echo', '/reset', '/short', '/bad', '/503', '/slow', '/hang']

/** The misbehaving upstream: what it does depends on the path (a mirror's never hangs: its copies may run 30 s). */
function chaosUpstream(req: http.IncomingMessage, res: http.ServerResponse, hangs: boolean): void {
  const p = (req.url ?? '/').split('?')[0] === '/hang' && !hangs ? '/ok' : (req.url ?? '/').split('?')[0]
  req.on('error', () => {})
  res.on('error', () => {})
  const socket = req.socket
  switch (p) {
    case '/big': {
      res.writeHead(200, { 'content-length': String(1024 * 1024) })
      let sent = 0
      const more = (): void => {
        while (sent < 1024 * 1024) {
          sent += 16384
          if (!res.write(Buffer.alloc(16384, 0x61))) { res.once('drain', more); return }
        }
        res.end()
      }
      more()
      return
    }
    case '/echo':
      res.writeHead(200, { 'content-type': 'application/octet-stream' })
      req.pipe(res)
      return
    case '/reset':
      res.writeHead(200, { 'content-length': '100000' })
      res.write(Buffer.alloc(1000, 0x62), () => socket.resetAndDestroy())
      return
    case '/short':
      res.writeHead(200, { 'content-length': '1000' })
      res.write('only ten b', () => socket.end())
      return
    case '/bad':
      socket.end('HTTP/1.1 2x0 nonsense\r\nwhat: \r\n\r\n')
      return
    case '/503':
      res.writeHead(503, { 'content-type': 'text/plain' })
      res.end('unavailable')
      return
    case '/slow':
      setTimeout(() => { if (!res.destroyed) res.end('slow') }, 300).unref()
      return
    case '/hang':
      req.resume()
      return
    default:
      req.resume()
      res.end('ok')
  }
}

/** Upgraded (tunnelled) connections each upstream holds open. */
const tunnelsOpen = new Map<number, () => number>()

async function upstream(t: { teardown(fn: () => unknown): void }, hangs = true): Promise<number> {
  const server = http.createServer((req, res) => chaosUpstream(req, res, hangs))
  server.on('clientError', (_e, s) => s.destroy())
  // WebSocket-shaped upgrades: 101, then an echo that now and then resets.
  const upgraded = new Set<net.Socket>()
  server.on('upgrade', (_req, socket: net.Socket) => {
    upgraded.add(socket)
    socket.once('close', () => upgraded.delete(socket))
    socket.on('error', () => {})
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n')
    socket.on('data', (d: Buffer) => { if (d.includes('reset')) socket.resetAndDestroy(); else socket.write(d) })
    // node's http.Server keeps upgraded sockets half-open: end ours when the gateway ends its side.
    socket.on('end', () => socket.end())
  })
  const port = await listenLoopback(server)
  tunnelsOpen.set(port, () => upgraded.size)
  t.teardown(() => new Promise<void>((resolve) => {
    for (const s of upgraded) s.destroy()
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  return port
}

/** Runs `fn`, never throwing, never longer than `ms`. */
async function bounded(ms: number, fn: (done: () => void) => void): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms)
    try {
      fn(() => { clearTimeout(timer); resolve() })
    } catch {
      clearTimeout(timer)
      resolve()
    }
  })
}

t.test('CLI: misbehaving clients and upstreams leave the gateway alive, serving and without leaks', async (t) => {
  t.comment(`seed ${SEED} (SALLYPORT_CHAOS_SEED=N runs another mix)`)
  const [up, mirror, upExt] = [await upstream(t), await upstream(t, false), await upstream(t)]
  const [port, tlsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const ca = createCa('chaos CA')
  const cert = serverCert(ca, ['plain.example.test', 'mirror.example.test', 'ext.example.test'])
  const b64 = (text: string): string => Buffer.from(text).toString('base64')
  const dir = tempDir(t)
  const w = (file: string, text: string): void => fs.writeFileSync(path.join(dir, file), text)
  w('observe.mjs', `export default () => ({
  async requestHeaders(req) { if (req.path.includes('async')) await new Promise((r) => setTimeout(r, 1)) },
  requestBody() {},
  responseHeaders() {},
  responseBody() {},
})
`)
  w('gateway.yaml', gatewayYaml(port, `    - name: https
      protocol: HTTPS
      port: ${tlsPort}
      tls:
        certificateRefs:
          - name: listener-cert
`))
  w('secret.yaml', `apiVersion: v1
kind: Secret
metadata: { name: listener-cert, namespace: default }
type: kubernetes.io/tls
data:
  tls.crt: ${b64(cert.fullChainPem)}
  tls.key: ${b64(cert.keyPem)}
`)
  w('backends.yaml', [
    `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: up, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${up} } }]
`,
    `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: mirror-up, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${mirror} } }]
`,
    egressBackend('up-ext', upExt, `  - name: observe
    type: Plugin
    failOpen: false
    config: { path: ${JSON.stringify(path.join(dir, 'observe.mjs'))}, maxBodyBytes: 2097152 }
`),
  ].join('---\n'))
  w('routes.yaml', [
    // CONNECT plain.example.test:<up> is allowed too (forward-proxy mode): a tunnel to the upstream.
    routeYaml('plain', 'plain.example.test', 'up', up, '', 'request: 1500ms')
      .replace('  name: plain\n', `  name: plain\n  annotations:\n    sallyport.io/connect-ports: "${up}"\n`),
    routeYaml('mirrored', 'mirror.example.test', 'up', up, `        - type: RequestMirror
          requestMirror:
            backendRef: { group: gateway.envoyproxy.io, kind: Backend, name: mirror-up, port: ${mirror} }`, 'request: 1500ms'),
    routeYaml('ext', 'ext.example.test', 'up-ext', upExt, '', 'request: 1500ms'),
  ].join('---\n'))
  w('policy.yaml', `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: retries, namespace: default }
spec:
  targetRefs:
    - { group: gateway.networking.k8s.io, kind: HTTPRoute, name: plain }
    - { group: gateway.networking.k8s.io, kind: HTTPRoute, name: ext }
  retry:
    numRetries: 2
    retryOn:
      triggers: [connect-failure, reset, refused-stream, retriable-status-codes]
      httpStatusCodes: [503]
    perRetry:
      backOff: { baseInterval: 5ms, maxInterval: 20ms }
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => fetch(`http://127.0.0.1:${adminPort}/readyz`).then((r) => r.status), (s) => s === 200, 20000, '/readyz 200')

  const only = (name: string, all: readonly string[]): string[] => {
    const want = process.env[name]?.split(',')
    return want === undefined ? [...all] : all.filter((x) => want.some((w) => x.includes(w)))
  }
  const hosts = only('SALLYPORT_CHAOS_HOSTS', ['plain.example.test', 'mirror.example.test', 'ext.example.test'])
  const paths = only('SALLYPORT_CHAOS_PATHS', PATHS)
  const random = rng(SEED)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 })
  t.teardown(() => agent.destroy())
  const counts = new Map<string, number>()
  // Whatever a client left open when its action's time ran out is closed at the end:
  // what stays counted after that is the gateway's.
  const open = new Set<{ destroy(): void }>()
  const track = <T extends { destroy(): void, once(event: 'close', fn: () => void): unknown }>(x: T): T => {
    open.add(x)
    x.once('close', () => open.delete(x))
    return x
  }

  /** A raw client connection to the plain port, read and dropped; `done` when it ends either way. */
  const rawClient = (done: () => void): net.Socket => {
    const s = track(net.connect(port, '127.0.0.1'))
    s.on('error', done)
    s.on('close', done)
    s.on('data', () => {})
    return s
  }
  /** A response handler: the body read and dropped, `done` at its end or failure. */
  const drained = (done: () => void) => (res: http.IncomingMessage): void => {
    res.resume()
    res.on('end', done)
    res.on('error', done)
  }

  const actions: Record<string, () => Promise<void>> = {
    // A plain request on a kept-alive connection, any path.
    async get() {
      await bounded(5000, (done) => {
        const req = http.request({ port, host: '127.0.0.1', path: pick(paths) + (random() < 0.3 ? '?async' : ''), agent, headers: { host: pick(hosts) } }, drained(done))
        req.on('error', done)
        req.end()
      })
    },
    // A download dropped after its first chunk.
    async abortDownload() {
      await bounded(5000, (done) => {
        const req = track(http.request({ port, host: '127.0.0.1', path: '/big', agent: false, headers: { host: pick(hosts) } }, (res) => {
          res.once('data', () => { req.destroy(); done() })
          res.on('end', done)
        }))
        req.on('error', done)
        req.end()
      })
    },
    // An upload dropped halfway (the route may be retrying, mirroring or buffering it).
    async abortUpload() {
      await bounded(5000, (done) => {
        const req = track(http.request({ port, host: '127.0.0.1', method: 'POST', path: '/echo', agent: false, headers: { host: pick(hosts), 'content-length': String(512 * 1024) } }, (res) => { res.resume(); res.on('end', done) }))
        req.on('error', done)
        req.write(Buffer.alloc(64 * 1024, 0x63))
        setTimeout(() => { req.destroy(); done() }, Math.floor(random() * 30))
      })
    },
    // A whole upload, echoed.
    async upload() {
      await bounded(5000, (done) => {
        const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/echo', agent, headers: { host: pick(hosts) } }, drained(done))
        req.on('error', done)
        req.end(Buffer.alloc(Math.floor(random() * 300_000), 0x64))
      })
    },
    // Raw sockets: half a head, garbage, or pipelined requests and a reset.
    async raw() {
      await bounded(3000, (done) => {
        const s = rawClient(done)
        const kind = random()
        const host = pick(hosts)
        s.on('connect', () => {
          if (kind < 0.33) { s.write(`GET /ok HTTP/1.1\r\nHost: ${host}\r\nX-Half: `); setTimeout(() => s.destroy(), 5) }
          else if (kind < 0.5) s.end('GARBAGE \x00\x01 NOT HTTP\r\n\r\n')
          else {
            let text = ''
            for (let i = 0; i < 3; i++) text += `GET ${pick(paths)} HTTP/1.1\r\nHost: ${host}\r\n\r\n`
            s.write(text)
            setTimeout(() => s.resetAndDestroy(), Math.floor(random() * 20))
          }
        })
      })
    },
    // Over TLS: a request, a download dropped, or a handshake cut short.
    async tls() {
      await bounded(5000, (done) => {
        const host = pick(hosts)
        const kind = random()
        if (kind < 0.25) {
          const s = track(tls.connect({ port: tlsPort, host: '127.0.0.1', servername: host, ca: ca.certPem }))
          s.on('error', done)
          s.on('close', done)
          setTimeout(() => s.destroy(), Math.floor(random() * 3))
          return
        }
        const req = track(https.request({ port: tlsPort, host: '127.0.0.1', servername: host, ca: ca.certPem, path: kind < 0.6 ? pick(paths) : '/big', agent: false, headers: { host } }, (res) => {
          if (kind >= 0.6) res.once('data', () => { req.destroy(); done() })
          drained(done)(res)
        }))
        req.on('error', done)
        req.end()
      })
    },
    // WebSocket-shaped upgrades: bytes echoed, then the client or the upstream ends it abruptly.
    async upgrade() {
      await bounded(3000, (done) => {
        const s = rawClient(done)
        s.on('connect', () => {
          s.write(`GET /ws HTTP/1.1\r\nHost: ${pick(hosts)}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`)
          setTimeout(() => s.write(random() < 0.3 ? 'reset' : 'hello'), 5)
          setTimeout(() => (random() < 0.5 ? s.resetAndDestroy() : s.end()), 10 + Math.floor(random() * 20))
        })
      })
    },
    // Forward-proxy CONNECT tunnels: a request inside, garbage, or nothing; then closed or reset.
    async connect() {
      await bounded(3000, (done) => {
        const s = rawClient(done)
        s.on('connect', () => {
          s.write(`CONNECT plain.example.test:${up} HTTP/1.1\r\nHost: plain.example.test:${up}\r\n\r\n`)
          const kind = random()
          setTimeout(() => {
            if (kind < 0.4) s.write(`GET ${pick(paths)} HTTP/1.1\r\nHost: inside\r\n\r\n`)
            else if (kind < 0.6) s.write('\x16\x03\x01 not a hello')
          }, 5)
          setTimeout(() => (random() < 0.5 ? s.resetAndDestroy() : s.end()), 10 + Math.floor(random() * 30))
        })
      })
    },
    // HTTP/2 with prior knowledge (or over TLS): streams cancelled at random, the session dropped at random.
    async h2() {
      await bounded(5000, (done) => {
        const overTls = random() < 0.3
        const session = track(overTls
          ? http2.connect(`https://127.0.0.1:${tlsPort}`, { ca: ca.certPem, servername: 'plain.example.test' })
          : http2.connect(`http://127.0.0.1:${port}`))
        session.on('error', () => {})
        session.on('close', done)
        const host = pick(hosts)
        let open = 0
        for (let i = 0; i < 6; i++) {
          const p = pick(paths)
          const stream = session.request({ ':path': p, ':authority': host, ':method': p === '/echo' ? 'POST' : 'GET' }, { endStream: p !== '/echo' })
          open++
          stream.on('error', () => {})
          stream.on('data', () => {})
          stream.on('close', () => { if (--open === 0) session.close() })
          if (p === '/echo') {
            stream.write(Buffer.alloc(32 * 1024, 0x65))
            if (random() < 0.5) stream.end()
          }
          if (random() < 0.3) setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), Math.floor(random() * 20))
        }
        if (random() < 0.3) setTimeout(() => session.destroy(), Math.floor(random() * 40))
      })
    },
  }
  const names = only('SALLYPORT_CHAOS_ACTIONS', Object.keys(actions))
  const until = Date.now() + RUN_MS
  // Meanwhile the configuration changes every second (a route added, then swapped for another):
  // tables swap under all of the above.
  let reloads = 0
  const reloader = (async () => {
    while (Date.now() + 1000 < until) {
      await new Promise((resolve) => setTimeout(resolve, 1000))
      reloads++
      w('extra.yaml', routeYaml(`extra-${reloads}`, `extra${reloads}.example.test`, 'up', up))
    }
  })()
  await Promise.all([reloader, ...Array.from({ length: WORKERS }, async () => {
    while (Date.now() < until) {
      const name = pick(names)
      counts.set(name, (counts.get(name) ?? 0) + 1)
      await (actions[name] as () => Promise<void>)()
    }
  })])
  agent.destroy()
  for (const x of open) x.destroy()
  t.comment(`actions: ${[...counts].map(([k, v]) => `${k} ${v}`).join(', ')}`)

  if (!t.equal(cli.child.exitCode, null, 'the process is alive')) {
    t.comment((cli.stdout() + cli.stderr()).split('\n').filter((l) => !l.includes('"component":"access"')).slice(-70).join('\n'))
    return
  }
  const ok = await get(`http://127.0.0.1:${port}/ok`, 'plain.example.test')
  t.equal(ok.status, 200, `HTTP/1.1 still served (${ok.body.trim()})`)
  t.equal(ok.body, 'ok')
  const h2status = await new Promise<number>((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    setTimeout(() => { session.destroy(); reject(new Error('HTTP/2 request timed out')) }, 10000).unref()
    session.on('error', reject)
    const stream = session.request({ ':path': '/ok', ':authority': 'ext.example.test' })
    stream.on('response', (h) => { stream.resume(); stream.on('end', () => { session.close(); resolve(Number(h[':status'])) }) })
    stream.on('error', reject)
  })
  t.equal(h2status, 200, 'HTTP/2 still served')

  const gauges = await eventually(async () => {
    const m = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
    return {
      connections: metricSum(m, 'sallyport_downstream_active_connections'),
      streams: metricSum(m, 'sallyport_downstream_active_streams'),
      upstream: metricSum(m, 'sallyport_upstream_active_requests'),
      tunnels: metricSum(m, 'sallyport_l4_active_connections'),
    }
  }, (g) => g.connections === 0 && g.streams === 0 && g.upstream === 0 && g.tunnels === 0, 15000, 'no active connections, streams, upstream requests or tunnels').catch((err: Error) => ({ error: err.message }))
  if (!t.same(gauges, { connections: 0, streams: 0, upstream: 0, tunnels: 0 }, 'nothing left counted as active')) {
    const m = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
    t.comment(m.split('\n').filter((l) => /^sallyport_(downstream_active|upstream_active_requests|l4_active)/.test(l) && !/ 0$/.test(l)).join('\n'))
  }
  const tunnels = await eventually(async () => [...tunnelsOpen.values()].reduce((n, f) => n + f(), 0), (n) => n === 0, 10000, 'upstream tunnels closed').catch(() => -1)
  t.equal(tunnels, 0, 'every upgraded connection to the upstreams closed with its client')
  const opened = metricSum((await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body, 'sallyport_l4_connections_total')
  if (names.includes('connect')) t.ok(opened > 0, `CONNECT tunnels were opened (${opened})`)
  const reloaded = metricSum((await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body, 'sallyport_config_reloads_total')
  t.ok(reloaded > reloads / 2, `the configuration was swapped during the run (${reloaded} reloads for ${reloads} changes)`)
  const out = cli.stdout() + cli.stderr()
  t.notMatch(out, /uncaught|unhandled|TypeError|RangeError|ReferenceError|ERR_INTERNAL_ASSERTION|ERR_STREAM_(WRITE_AFTER_END|PUSH_AFTER_EOF)/i, 'nothing threw')
})
