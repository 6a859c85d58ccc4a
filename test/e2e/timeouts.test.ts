// HTTPRoute timeouts through the real CLI and YAML: timeouts.backendRequest bounds
// each try from its request going out to the last byte of the response (Gateway
// API: "to when the full response has been received"; it used to stop at the
// response head, so a body trickling on ran past it), timeouts.request the whole
// exchange; either one answers 504 (or cuts a response already begun), cancels
// the upstream request and says why in the access log. A backend that answers in
// time is untouched, on the same kept-alive pool.

import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { listenLoopback } from '../helpers/ports.ts'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'

t.test('HTTPRoute timeouts.backendRequest and timeouts.request through the CLI', async (t) => {
  const events: string[] = []
  const upstream = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    if (url.pathname === '/hang') {
      events.push(`arrived ${req.headers.host}`)
      res.on('close', () => { if (!res.writableFinished) events.push(`cancelled ${req.headers.host}`) })
      return
    }
    if (url.pathname === '/trickle') {
      // The head at once, then a byte every 100 ms for 1.5 s: past backendRequest.
      res.writeHead(200, { 'content-length': '15' })
      let n = 0
      const timer = setInterval(() => {
        if (res.destroyed || ++n > 15) { clearInterval(timer); res.end(); return }
        res.write('x')
      }, 100)
      res.on('close', () => { clearInterval(timer); if (!res.writableFinished) events.push(`cancelled trickle ${req.headers.host}`) })
      return
    }
    // Answers after `ms`: within the backendRequest timeout below.
    setTimeout(() => res.end('in time\n'), Number(url.searchParams.get('ms') ?? '0'))
  })
  const upPort = await listenLoopback(upstream)
  t.teardown(() => { upstream.closeAllConnections(); upstream.close() })

  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(port), backendYaml('up', upPort),
    routeYaml('backend-request', 'backend.example.test', 'up', upPort, '', 'backendRequest: 300ms'),
    routeYaml('whole-request', 'whole.example.test', 'up', upPort, '', 'request: 400ms'),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 30000, 'ready')
  const base = `http://127.0.0.1:${port}`

  const ok = await request(`${base}/answer?ms=50`, { host: 'backend.example.test' })
  t.equal(ok.status, 200, 'a backend that answers within backendRequest is untouched')
  t.equal(ok.body, 'in time\n')

  const slow = await request(`${base}/hang`, { host: 'backend.example.test' })
  t.equal(slow.status, 504, 'no response headers within backendRequest: 504')
  t.match(slow.body, /time/i, 'the body says it timed out')
  await eventually(async () => events.join(','), (s) => s.includes('cancelled backend.example.test'), 10000, 'upstream request cancelled')

  const whole = await request(`${base}/hang`, { host: 'whole.example.test' })
  t.equal(whole.status, 504, 'timeouts.request: 504')
  await eventually(async () => events.join(','), (s) => s.includes('cancelled whole.example.test'), 10000, 'upstream request cancelled')

  const trickle = await new Promise<{ status: number; body: string; complete: boolean }>((resolve) => {
    const req = http.get(`${base}/trickle`, { headers: { host: 'backend.example.test' }, agent: false }, (res) => {
      let body = ''
      res.setEncoding('latin1')
      res.on('data', (c: string) => { body += c })
      res.on('close', () => resolve({ status: res.statusCode ?? 0, body, complete: res.complete }))
    })
    req.on('error', () => resolve({ status: 0, body: '', complete: false }))
  })
  t.equal(trickle.status, 200, 'a response head in time is passed on')
  t.notOk(trickle.complete, 'but a body still coming at backendRequest is cut, never passed on as whole')
  t.ok(trickle.body.length < 15, `only part of it arrived (${trickle.body.length} of 15 bytes)`)
  await eventually(async () => events.join(','), (s) => s.includes('cancelled trickle backend.example.test'), 10000, 'upstream request cancelled')
  await cli.waitFor(/"path":"\/trickle","status":200[^\n]*"code":"SP_ERR_UPSTREAM_TIMEOUT"/, 5000)
  t.pass('logged as an upstream timeout')

  // The pool is still good: the next request on the backend-request route is served.
  const after = await request(`${base}/answer?ms=10`, { host: 'backend.example.test' })
  t.equal(after.status, 200)

  // The access log says why.
  const lines = await eventually(async () => cli.stdout().split('\n').filter((l) => l.includes('"component":"access"') && l.includes('"status":504')),
    (ls) => ls.length >= 2, 10000, 'two 504 access lines')
  for (const line of lines) {
    const rec = JSON.parse(line) as { code: string | null; route: string }
    t.match(rec.code ?? '', /TIMEOUT/, `access line for ${rec.route} names a timeout code`)
  }
})
