// The response header edits of a route (ResponseHeaderModifier) and of its
// backendRef apply to a tunnel's answer, the 101 to an HTTP/1.1 client or the
// 200 to an HTTP/2 client, as RequestHeaderModifier applies to the upgrade
// request. The fields the tunnel itself needs stay as the handshake makes
// them: Upgrade, Connection and the Sec-WebSocket-Accept that answers the
// client's key. Before, the edits were skipped on every tunnel.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { CLIENT_KEY, h1Tunnel, h1Upstream, h2Session, h2Tunnel, h2Upstream, h2cBackendYaml, until, websocketAccept, type TunnelHandler } from './tunnel-helpers.ts'

const echo: TunnelHandler = (_p, end) => {
  end.onEvent((e) => { if (e === '<FIN>') end.end(); else end.write(e) })
}

/** A route for `host` whose rule and backendRef both edit response headers. */
function editingRoute(name: string, host: string, backend: string, port: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames:
    - ${host}
  rules:
    - filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            add: [{ name: x-resp, value: "yes" }]
            set: [{ name: x-up, value: replaced }]
            remove: [x-drop, sec-websocket-accept]
      backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: ${backend}
          port: ${port}
          filters:
            - type: ResponseHeaderModifier
              responseHeaderModifier:
                add: [{ name: x-backend-resp, value: "yes" }]
`
}

t.test('CLI: response header edits apply to a tunnel\'s 101 / 200', async (t) => {
  const upH1 = await h1Upstream(t, echo, (_p, key) =>
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${websocketAccept(key)}\r\nX-Up: 1\r\nX-Drop: 1\r\n\r\n`)
  const upH2 = await h2Upstream(t, echo, { 'x-up': '1', 'x-drop': '1' })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(port), backendYaml('up-h1', upH1), h2cBackendYaml('up-h2', upH2),
    editingRoute('to-h1', 'h1.test', 'up-h1', upH1), editingRoute('to-h2', 'h2.test', 'up-h2', upH2),
  ].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  const session = await h2Session(t, port)

  for (const upstream of ['h1', 'h2']) {
    const h1 = await h1Tunnel(t, port, `${upstream}.test`, '/ws')
    const head = h1.head.toLowerCase()
    t.equal(h1.status, 101, `h1 client → ${upstream} upstream: 101`)
    t.match(head, /\r\nx-resp: yes\r\n/, `h1 → ${upstream}: the route's added field`)
    t.match(head, /\r\nx-backend-resp: yes\r\n/, `h1 → ${upstream}: the backendRef's added field`)
    t.match(head, /\r\nx-up: replaced\r\n/, `h1 → ${upstream}: the upstream's field, set anew`)
    t.notMatch(head, /x-drop/, `h1 → ${upstream}: the removed field is gone`)
    t.match(head, `\r\nsec-websocket-accept: ${websocketAccept(CLIENT_KEY).toLowerCase()}\r\n`, `h1 → ${upstream}: the accept of the client's key, whatever the edits`)
    t.match(head, /\r\nupgrade: websocket\r\n/, `h1 → ${upstream}: Upgrade`)
    t.match(head, /\r\nconnection: upgrade\r\n/, `h1 → ${upstream}: Connection`)
    h1.write('ping')
    await until(() => h1.got === 'ping', `h1 → ${upstream}: the echo`).catch((err: Error) => t.fail(err.message))
    h1.end()

    const h2 = await h2Tunnel(session, `${upstream}.test`, '/ws')
    const fields = JSON.parse(h2.head) as Record<string, unknown>
    t.equal(h2.status, 200, `h2 client → ${upstream} upstream: 200`)
    t.match(fields, { 'x-resp': 'yes', 'x-backend-resp': 'yes', 'x-up': 'replaced' }, `h2 → ${upstream}: the edits`)
    t.notOk('x-drop' in fields, `h2 → ${upstream}: the removed field is gone`)
    h2.write('ping')
    await until(() => h2.got === 'ping', `h2 → ${upstream}: the echo`).catch((err: Error) => t.fail(err.message))
    h2.end()
  }
})
