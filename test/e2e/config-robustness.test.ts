// The real CLI fed hostile configuration files (the configuration probe): each
// one gets a problem naming the file, and the valid rest keeps serving.
import t from 'tap'
import type { Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, runCli, startCli, tempDir } from './harness.ts'

async function upstream(t: Test): Promise<number> {
  const server = http.createServer((req, res) => { res.end(`upstream ${req.url}`) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return (server.address() as AddressInfo).port
}

const deepJson = (levels: number): string => JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'deep', namespace: 'default' }, data: {} })
  .replace('"data":{}', `"data":{"a":${'['.repeat(levels)}${']'.repeat(levels)}}`)

t.test('CLI: a JSON file nested 200,000 levels deep is a problem, never a crash, added at start or on reload', async (t) => {
  const [httpPort, adminPort, upPort] = [await freePort(), await freePort(), await upstream(t)]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('up', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'up', upPort))
  fs.writeFileSync(path.join(dir, 'deep.json'), deepJson(200_000))

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1)
  t.match(v.stdout, /deep\.json:0: line 1, column \d+: nested more than 512 levels deep\n/)

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  t.equal((await request(`http://127.0.0.1:${httpPort}/x`, { host: 'api.example.test' })).status, 200, 'the valid rest serves')
  // On reload: a second deep file, in YAML this time, and the JSON one rewritten.
  fs.writeFileSync(path.join(dir, 'deep2.json'), deepJson(300_000))
  fs.writeFileSync(path.join(dir, 'deep3.yaml'), `apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep3, namespace: default}\ndata:\n  a: ${'['.repeat(100_000)}${']'.repeat(100_000)}\n`)
  const dump = await eventually(() => request(`http://127.0.0.1:${adminPort}/config_dump`), (r) => r.body.includes('deep3.yaml'), 15000, 'both problems listed')
  t.match(dump.body, /deep2\.json:0: line 1, column \d+: nested more than 512 levels deep/)
  t.match(dump.body, /deep3\.yaml:0: ConfigMap default\/deep3: line 5, column \d+: nested more than 512 levels deep/)
  t.equal(cli.child.exitCode, null, 'serve is still running')
  t.equal((await request(`http://127.0.0.1:${httpPort}/x`, { host: 'api.example.test' })).status, 200, 'and still serves')
})

t.test('CLI: validate names a sallyport annotation whose value compile would ignore (a deny-list entry, an OCSP mode)', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(8080, '', { 'sallyport.io/destination-denylist': '"*.pastebin.example,198.51.100.0/33"' }))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('up', 443, 'api.example.com').replace('  namespace: default\n', '  namespace: default\n  annotations:\n    sallyport.io/ocsp: requir\n'))
  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 0, 'warnings only: the objects still serve')
  t.match(v.stdout, /gateway\.yaml:1: Gateway default\/egress: metadata\.annotations\[sallyport\.io\/destination-denylist\]: "198\.51\.100\.0\/33" is not a CIDR; the entry is ignored\n/)
  t.match(v.stdout, /backend\.yaml:0: Backend default\/up: metadata\.annotations\[sallyport\.io\/ocsp\]: "requir" is not off, allow, must-staple or require/)
  t.match(v.stderr, /0 errors, 2 warnings/)
})
