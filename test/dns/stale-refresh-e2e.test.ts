// The real CLI and dnsmasq: a Backend's name moves to a new address while
// sallyport holds the old answer, expired (served stale while its refresh
// runs). The first request after the move is sent to the old address, which
// refuses; it then waits for the refresh and is answered by the new address,
// instead of failing with 503 while the new answer is a moment away.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from '../e2e/harness.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'

const skip = dnsmasqSkip()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

t.test('serve: a request refused by the address of an expired answer goes to the refreshed one', { skip: skip ?? false }, async (t) => {
  const live = http.createServer((_req, res) => res.end('moved'))
  await new Promise<void>((resolve) => live.listen(0, '127.0.0.5', resolve))
  t.teardown(() => new Promise<void>((resolve) => { live.closeAllConnections(); live.close(() => resolve()) }))
  const upPort = (live.address() as AddressInfo).port
  // Nothing listens on 127.0.0.7 at that port: connects there are refused.
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.7 api.svc.test'], ttl: 1 })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(httpPort), backendYaml('api', upPort, 'api.svc.test'), routeYaml('api', 'api.example.test', 'api', upPort)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--dns-server', dns.server, '--dns-min-ttl', '1', '--dns-max-ttl', '1', '--drain-seconds', '0'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  const url = `http://127.0.0.1:${httpPort}/`

  const refused = await request(url, { host: 'api.example.test' })
  t.equal(refused.status, 503, 'while the answer is current, its refusing address is the answer')

  // Unused, the answer is refreshed ahead once and then expires (TTL 1 s). The name moves.
  await sleep(2500)
  await dns.update(['127.0.0.5 api.svc.test'], { name: 'api.svc.test', expect: '127.0.0.5' })
  const res = await request(url, { host: 'api.example.test', timeoutMs: 10000 })
  t.equal(res.status, 200, 'the first request after the move is answered')
  t.equal(res.body, 'moved', 'by the new address')
  const metrics = await request(`http://127.0.0.1:${adminPort}/metrics`)
  t.match(metrics.body, /sallyport_dns_stale_answers_total [1-9]/, 'the expired answer was served (and refused)')
  // The access log is written asynchronously: its second line comes a moment later.
  await eventually(async () => cli.stdout(), (out) => /"status":200,.*"upstream":"127\.0\.0\.5:\d+"/.test(out), 5000, 'the access line of the answered request')
  t.pass('the access line names the new address')
})
