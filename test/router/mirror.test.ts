// RequestMirror body tee (router/mirror.ts): bounded copy, never slows the main request.

import t from 'tap'
import http from 'node:http'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { MIRROR_BODY_LIMIT } from '../../lib/router/mirror.ts'
import { echoH1, h1, startPlane } from '../listeners/fixtures.ts'

configureLogger({ level: 'silent' })

interface Mirrored { readonly url: string; readonly length: string | undefined; readonly body: Buffer }

async function mirrorUpstream(t: Parameters<typeof echoH1>[0]): Promise<{ port: number; got: Mirrored[] }> {
  const got: Mirrored[] = []
  const up = await echoH1(t, 'mirror', (req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => { got.push({ url: req.url ?? '', length: req.headers['content-length'], body: Buffer.concat(chunks) }); res.end('mirror') })
  })
  return { port: up.port, got }
}

async function planeWithMirror(t: Parameters<typeof echoH1>[0], mainPort: number, mirrorPort: number): Promise<number> {
  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: { routes: [{ name: 'r', rules: [{ mirrors: [{ cluster: 'mirror', percent: 100 }], backends: [{ cluster: 'main' }] }] }] },
  }, [cluster('main', mainPort), cluster('mirror', mirrorPort)]))
  return port
}

async function until(check: () => boolean, ms: number): Promise<void> {
  for (let waited = 0; waited < ms && !check(); waited += 20) await new Promise((resolve) => setTimeout(resolve, 20))
}

t.test('a body within the bound reaches the mirror whole, with its length', async (t) => {
  const main = await echoH1(t, 'main')
  const mirror = await mirrorUpstream(t)
  const port = await planeWithMirror(t, main.port, mirror.port)
  const body = Buffer.alloc(MIRROR_BODY_LIMIT, 0x61)
  const r = await h1(port, { path: '/copy', method: 'POST', body })
  t.equal(r.status, 200)
  t.equal(JSON.parse(r.body).bytes, body.length, 'main upstream got the whole body')
  await until(() => mirror.got.length > 0, 3000)
  t.equal(mirror.got.length, 1)
  t.equal(mirror.got[0].url, '/copy')
  t.equal(mirror.got[0].length, String(body.length))
  t.ok(mirror.got[0].body.equals(body), 'mirror got the same bytes')

  // A chunked body (no content-length) is mirrored with one.
  const chunked = await new Promise<number>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/chunked', agent: false, headers: { host: 'example.com' } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      res.on('end', () => resolve(JSON.parse(text).bytes as number))
    })
    req.on('error', reject)
    req.write('abc')
    setTimeout(() => req.end('def'), 20)
  })
  t.equal(chunked, 6)
  await until(() => mirror.got.length > 1, 3000)
  t.equal(mirror.got[1]?.body.toString(), 'abcdef')
  t.equal(mirror.got[1]?.length, '6')
})

t.test('a body over the bound is not mirrored; the main request is whole', async (t) => {
  const main = await echoH1(t, 'main')
  const mirror = await mirrorUpstream(t)
  const port = await planeWithMirror(t, main.port, mirror.port)
  const body = Buffer.alloc(MIRROR_BODY_LIMIT * 4 + 1, 0x62)
  const r = await h1(port, { path: '/big', method: 'POST', body })
  t.equal(r.status, 200)
  t.equal(JSON.parse(r.body).bytes, body.length)
  // A bodyless request after it is mirrored at once: when it arrived, the big one would have too.
  t.equal((await h1(port, { path: '/after' })).status, 200)
  await until(() => mirror.got.length > 0, 3000)
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.same(mirror.got.map((m) => m.url), ['/after'], 'only the bodyless request was mirrored')
})

t.test('a mirror that never answers does not hold the main request back', async (t) => {
  const main = await echoH1(t, 'main')
  // Never reads, never answers (until it hangs up, so the test's teardown need not wait out the mirror timeout).
  const stuck = await echoH1(t, 'stuck', (req) => { setTimeout(() => req.socket.destroy(), 1500) })
  const port = await planeWithMirror(t, main.port, stuck.port)
  for (let i = 0; i < 5; i++) {
    const r = await h1(port, { path: `/p${i}`, method: 'POST', body: 'x'.repeat(1000) })
    t.equal(r.status, 200)
    t.equal(JSON.parse(r.body).bytes, 1000)
  }
})

t.test('a mirror whose answer breaks off (short body, reset) costs nothing but the copy', async (t) => {
  const main = await echoH1(t, 'main')
  let mirrored = 0
  const mirror = await echoH1(t, 'mirror', (req, res) => {
    mirrored++
    req.resume()
    res.writeHead(200, { 'content-length': '1000' })
    // Ten bytes of a promised thousand, then the end of the connection, or a reset.
    res.write('only ten b', () => { if (req.url === '/reset') req.socket.resetAndDestroy(); else req.socket.end() })
  })
  const port = await planeWithMirror(t, main.port, mirror.port)
  for (const path of ['/short', '/reset', '/short']) {
    const r = await h1(port, { path, method: 'GET' })
    t.equal(r.status, 200, `${path}: the main answer is untouched`)
  }
  await until(() => mirrored >= 3, 3000)
  await new Promise((resolve) => setTimeout(resolve, 100))
  const after = await h1(port, { path: '/after', method: 'POST', body: Buffer.from('x') })
  t.equal(after.status, 200, 'still serving (a mirror body error has nobody to reach, and must not be thrown)')
})
