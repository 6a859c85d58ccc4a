// A client's `Expect: 100-continue` is answered by the gateway (100 Continue),
// and the request goes upstream without it, its body streaming at once: with
// either HTTP/1.1 upstream client. undici refused the field it was handed, so
// through `--http1-client undici` such a POST was a 502 after the 100.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, rawExchange, routeYaml, startCli, tempDir } from './harness.ts'
import { get, recorder } from './extensions-helpers.ts'

for (const client of ['sallyport', 'undici']) {
  t.test(`CLI (--http1-client ${client}): Expect: 100-continue`, async (t) => {
    const up = await recorder(t, (s, res) => res.end(`got ${s.body} expect=${s.headers.expect ?? 'none'}`))
    const [port, adminPort] = [await freePort(), await freePort()]
    const dir = tempDir(t)
    fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('api', up.port), routeYaml('api', 'api.example.test', 'api', up.port)].join('---\n'))
    startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--http1-client', client])
    await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
    const r = await rawExchange(port, 'POST /up HTTP/1.1\r\nHost: api.example.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello', { until: /expect=\w+$/ })
    t.match(r, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /, 'the 100 from the gateway, then the upstream\'s 200')
    t.match(r, /got hello expect=none$/, 'the body reached the upstream, without the Expect field')
  })
}
