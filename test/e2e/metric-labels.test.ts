// The `gateway` label (and the server span's sallyport.gateway) is the
// Gateway's `namespace/name` for every request, routed or not, and names the
// Gateway the request came through: a route attached to two Gateways counts
// each one's requests under its own. Routed requests used to carry
// `namespace/name/listener` (the listener twice over, beside the `listener`
// label), unrouted ones `namespace/name`, and a route's requests counted
// under the first Gateway it was attached through. The duration histogram
// carries `code`, and a Plugin's request view says which Gateway (its
// `gateway` was the rule's first, with the listener appended).
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, metricSum, rawExchange, routeYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder } from './extensions-helpers.ts'

const send = (port: number, host: string): Promise<string> => rawExchange(port, `GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`)

t.test('CLI: the gateway label names the Gateway a request came through', async (t) => {
  const up = await recorder(t, (s, res) => res.end(String(s.headers['x-gateway'])))
  const [portA, portB, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(portA))
  fs.writeFileSync(path.join(dir, 'gateway-b.yaml'), gatewayYaml(portB).split('---\n')[1].replace('name: egress', 'name: other'))
  fs.writeFileSync(path.join(dir, 'tag.mjs'), 'export default () => ({ requestHeaders(req) { req.headers["x-gateway"] = req.gateway } })\n')
  fs.writeFileSync(path.join(dir, 'backend.yaml'), egressBackend('api', up.port, `  - name: tag
    type: Plugin
    config: { path: ${JSON.stringify(path.join(dir, 'tag.mjs'))} }
`))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', up.port).replace('    - name: egress\n', '    - name: egress\n    - name: other\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  for (let i = 0; i < 3; i++) t.match(await send(portA, 'api.example.test'), /^HTTP\/1\.1 200 [^]*\r\n\r\ndefault\/egress$/)
  t.match(await send(portB, 'api.example.test'), /^HTTP\/1\.1 200 [^]*\r\n\r\ndefault\/other$/, 'a Plugin sees the Gateway the request came through')
  t.match(await send(portA, 'nowhere.test'), /^HTTP\/1\.1 404 /)
  await cli.waitFor(/"authority":"nowhere\.test"/)
  const m = await eventually(async () => (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body,
    (text) => metricSum(text, 'sallyport_downstream_requests_total') === 5, 5000, 'five requests counted')
  const total = (labels: Record<string, string>): number => metricSum(m, 'sallyport_downstream_requests_total', labels)
  t.equal(total({ gateway: 'default/egress', listener: 'http', route: 'default/api', code: '200' }), 3, 'routed through egress: gateway="default/egress"')
  t.equal(total({ gateway: 'default/other', listener: 'http', route: 'default/api', code: '200' }), 1, 'the same route through other: gateway="default/other"')
  t.equal(total({ gateway: 'default/egress', route: '', code: '404' }), 1, 'unrouted: the same gateway label')
  t.notMatch(m, /gateway="default\/(?:egress|other)\/http"/, 'no listener in the gateway label')
  t.equal(metricSum(m, 'sallyport_downstream_request_duration_seconds_count', { gateway: 'default/egress', route: 'default/api', code: '200' }), 3,
    'the duration histogram by code')
})
