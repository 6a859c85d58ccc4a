// The CLI's offline commands and argument handling.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { runCli, tempDir } from '../e2e/harness.ts'

const good = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: sallyport
spec:
  controllerName: sallyport.io/gateway-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
spec:
  gatewayClassName: sallyport
  listeners:
    - name: http
      protocol: HTTP
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: api
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames:
    - api.example.test
  rules:
    - backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: demo
          port: 9080
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: demo
  namespace: default
spec:
  endpoints:
    - ip:
        address: 127.0.0.1
        port: 9080
`

const badRoute = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: broken
  namespace: team
spec:
  parentRefs:
    - name: egress
  rules:
    - matches:
        - path:
            type: Bogus
            value: /x
`

t.test('validate: clean files print nothing and exit 0', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'good.yaml'), good)
  const r = await runCli(t, ['validate', dir])
  t.equal(r.code, 0)
  t.equal(r.stdout, '')
  t.match(r.stderr, /0 errors, 0 warnings/)
})

t.test('validate: one line per problem, exit 1 on errors', async (t) => {
  const dir = tempDir(t)
  const goodFile = path.join(dir, 'a-good.yaml')
  const badFile = path.join(dir, 'b-bad.yaml')
  const brokenFile = path.join(dir, 'c-broken.yaml')
  fs.writeFileSync(goodFile, good)
  fs.writeFileSync(badFile, `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fine\n---\n${badRoute}`)
  fs.writeFileSync(brokenFile, 'kind: ConfigMap\nmetadata:\n  name: x\n  labels: a: b\n')
  const r = await runCli(t, ['validate', goodFile, badFile, brokenFile])
  t.equal(r.code, 1)
  // Files in argument order, documents in file order.
  t.equal(r.stdout, [
    `${badFile}:1: HTTPRoute team/broken: spec.rules[0].matches[0].path.type: "Bogus" is not one of Exact, PathPrefix, RegularExpression`,
    `${brokenFile}:0: ConfigMap x: line 4, column 11: Nested mappings are not allowed in compact mappings`,
    '',
  ].join('\n'))
  t.match(r.stderr, /2 errors, 0 warnings/)
})

t.test('validate: warnings are printed but pass', async (t) => {
  const dir = tempDir(t)
  const file = path.join(dir, 'insecure.yaml')
  fs.writeFileSync(file, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: insecure
  namespace: team
spec:
  endpoints:
    - fqdn:
        hostname: api.example.com
        port: 443
  tls:
    insecureSkipVerify: true
`)
  const r = await runCli(t, ['validate', file])
  t.equal(r.code, 0)
  t.equal(r.stdout, `${file}:0: Backend team/insecure: spec.tls.insecureSkipVerify: certificate verification is disabled (insecureSkipVerify: true)\n`)
  t.match(r.stderr, /0 errors, 1 warning\b/)
})

t.test('validate: a directory with no configuration file in it is a warning', async (t) => {
  const empty = tempDir(t)
  const other = tempDir(t)
  fs.writeFileSync(path.join(other, 'notes.txt'), 'hello')
  fs.writeFileSync(path.join(other, '.hidden.yaml'), good)
  for (const dir of [empty, other]) {
    const r = await runCli(t, ['validate', dir])
    t.equal(r.code, 0)
    t.equal(r.stdout, `${dir}:0: no configuration file (.yaml, .yml, .json) found\n`)
    t.match(r.stderr, /0 errors, 1 warning\b/)
  }
})

t.test('routes prints the compiled table', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'good.yaml'), good)
  const r = await runCli(t, ['routes', dir])
  t.equal(r.code, 0)
  t.match(r.stdout, /8080/)
  t.match(r.stdout, /api\.example\.test/)
})

t.test('routes --publish-service: the Gateways\' addresses from the Service in the files; a missing one is a warning on stderr', async (t) => {
  const dir = tempDir(t)
  const withSpec = good.replace('  gatewayClassName: sallyport\n', '  gatewayClassName: sallyport\n  addresses:\n    - {type: IPAddress, value: 192.0.2.1}\n')
  fs.writeFileSync(path.join(dir, 'good.yaml'), `${withSpec}---
apiVersion: v1
kind: Service
metadata: {name: sallyport, namespace: sallyport-system}
spec: {type: LoadBalancer, clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}
status: {loadBalancer: {ingress: [{hostname: lb.example.net}]}}
`)
  let r = await runCli(t, ['routes', dir, '--publish-service', 'sallyport-system/sallyport'])
  t.equal(r.code, 0)
  t.match(r.stdout, /^addresses\n {2}Gateway default\/egress: \(none\)$/m, 'the requested address is not one of the Service\'s: none bound')
  t.match(r.stdout, /Gateway default\/egress: Programmed=False AddressNotUsable: requested address 192\.0\.2\.1 \(IPAddress\) cannot be used: Service sallyport-system\/sallyport \(--publish-service\) has lb\.example\.net, 10\.96\.0\.10/)
  fs.writeFileSync(path.join(dir, 'good.yaml'), good)
  r = await runCli(t, ['routes', dir, '--publish-service', 'sallyport-system/sallyport'])
  t.equal(r.code, 0, 'a missing Service fails nothing')
  t.match(r.stderr, /^--publish-service:0: Service sallyport-system\/sallyport: no such Service/m)
  t.match(r.stdout, /Gateway default\/egress: \(none\)/)
})

t.test('version', async (t) => {
  const r = await runCli(t, ['version'])
  t.equal(r.code, 0)
  t.match(r.stdout, /^sallyport \d+\.\d+\.\d+ \(node v24\./)
})

t.test('argument errors print usage and exit 2', async (t) => {
  for (const args of [[], ['frobnicate'], ['serve'], ['serve', '--config'], ['serve', '--config', '/nonexistent/dir'], ['serve', '--config', '.', '--workers', 'x'], ['serve', '--config', '.', '--bogus'], ['serve', '--config', '.', '--admin', 'nope'], ['validate'], ['routes'], ['validate', '/nonexistent/dir'], ['routes', '/nonexistent/dir'], ['serve', '--config', '.', '--publish-service', 'sallyport'], ['serve', '--config', '.', '--publish-service', 'a/B'], ['routes', '.', '--publish-service', 'a/b/c']]) {
    const r = await runCli(t, args)
    t.equal(r.code, 2, args.join(' '))
    t.match(r.stderr, /Usage: sallyport <command>/)
  }
})

t.test('--help and -h after any command print usage on stdout and exit 0', async (t) => {
  for (const args of [['--help'], ['serve', '--help'], ['serve', '--config', '.', '-h'], ['validate', '--help'], ['routes', '-h'], ['quickstart', '--help'], ['version', '--help']]) {
    const r = await runCli(t, args)
    t.equal(r.code, 0, args.join(' '))
    t.match(r.stdout, /^Usage: sallyport <command>/, args.join(' '))
    t.equal(r.stderr, '', args.join(' '))
  }
})

t.test('serve --bind an address this host does not have is a usage error naming it, not a listener retried for ever', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), good)
  const r = await runCli(t, ['serve', '--config', dir, '--bind', '192.0.2.77', '--admin', 'off'])
  t.equal(r.code, 2)
  t.match(r.stderr, /^sallyport: --bind 192\.0\.2\.77: not an address of this host \(EADDRNOTAVAIL\)/)
})
