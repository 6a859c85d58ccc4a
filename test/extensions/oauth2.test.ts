// OAuth2 TokenSource against a loopback token endpoint, with injected clock
// and timers: a token living longer than a timer can wait (2^31-1 ms, 24.8
// days) is refreshed when due, not every millisecond.
import t from 'tap'
import http from 'node:http'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import { TokenSource, oauth2, type Timers } from '../../lib/extensions/oauth2.ts'
import type { ClientInfo, RequestView } from '../../lib/extensions/plugin-api.ts'

const MAX_TIMER_MS = 2 ** 31 - 1

/** A token endpoint on 127.0.0.1 answering `answer()` (JSON) to each POST. */
async function tokenEndpoint(t: { teardown(fn: () => unknown): void }, answer: () => unknown): Promise<{ url: string; fetches(): number }> {
  let n = 0
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      n++
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(answer()))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/token`, fetches: () => n }
}

function spec(config: Record<string, unknown>): CompiledExtension {
  return {
    key: 'Backend default/b/oauth', name: 'oauth', type: 'OAuth2ClientCredentials', phases: ['request-headers'], priority: 0, failOpen: false,
    scope: 'Backend', source: 'Backend default/b', namespace: 'default', config, secrets: { secretRef: { client_id: 'id', client_secret: 's' } }, error: null,
  }
}

/** Fake timers: armed timers are listed; `fire` runs the due ones after moving the clock. */
function fakeTimers(): Timers & { armed: Array<{ fn: () => void; at: number; ms: number }>; advance(ms: number): void } {
  let now = 1_000_000
  const armed: Array<{ fn: () => void; at: number; ms: number }> = []
  return {
    armed,
    now: () => now,
    arm(fn, ms) { const e = { fn, at: now + ms, ms }; armed.push(e); return e },
    cancel(h) { const i = armed.indexOf(h as typeof armed[number]); if (i !== -1) armed.splice(i, 1) },
    advance(ms) {
      now += ms
      for (const e of armed.filter(x => x.at <= now)) { armed.splice(armed.indexOf(e), 1); e.fn() }
    },
  }
}

t.test('expires_in of a year: timers no longer than node allows, one fetch until the refresh is due', async (t) => {
  const ep = await tokenEndpoint(t, () => ({ access_token: 'tok', token_type: 'Bearer', expires_in: 31_536_000 }))
  const timers = fakeTimers()
  const config = { tokenUrl: ep.url, secretRef: { name: 'c' } }
  const source = new TokenSource(spec(config), config, 'secretRef', timers)
  t.teardown(() => source.close())
  await source.refresh()
  t.equal(source.current(), 'Bearer tok')
  t.equal(timers.armed.length, 1, 'one refresh timer')
  t.ok((timers.armed[0]?.ms ?? Infinity) <= MAX_TIMER_MS, `armed for ${timers.armed[0]?.ms} ms, at most 2^31-1`)
  // A year less the 60 s lead: 14 capped waits, each re-arming without fetching.
  let waits = 0
  while (timers.armed.length === 1 && (timers.armed[0] as { ms: number }).ms === MAX_TIMER_MS && waits < 100) {
    timers.advance(MAX_TIMER_MS)
    waits++
  }
  t.equal(waits, Math.floor((31_536_000_000 - 60_000) / MAX_TIMER_MS), 'capped waits')
  t.equal(source.fetches, 1, 'no fetch while waiting')
  t.equal(timers.armed.length, 1)
  timers.advance((timers.armed[0] as { ms: number }).ms)
  await source.refresh() // the fetch the timer started (single-flight)
  t.equal(source.fetches, 2, 'fetched once the refresh is due')
  t.equal(ep.fetches(), 2)
})

t.test('a token answer over 64 KiB fails the fetch', async (t) => {
  const ep = await tokenEndpoint(t, () => ({ access_token: 'tok', expires_in: 3600, padding: 'x'.repeat(100 * 1024) }))
  const config = { tokenUrl: ep.url, secretRef: { name: 'c' } }
  const source = new TokenSource(spec(config), config, 'secretRef', fakeTimers())
  t.teardown(() => source.close())
  await t.rejects(source.refresh(), /token endpoint answered more than 65536 bytes/)
  await t.rejects(Promise.resolve(source.current()), /more than 65536 bytes/, 'requests fail (the extension failed) until a fetch succeeds')
})

t.test('an access_token that is not a field value (CR, LF, NUL) fails the fetch', async (t) => {
  const cases: Array<[string, string]> = [['CR LF', 'tok\r\nx-evil: 1'], ['LF', 'tok\nx'], ['NUL', 'tok\u0000'], ['U+2028', 'tok\u2028']]
  for (const [what, bad] of cases) {
    const ep = await tokenEndpoint(t, () => ({ access_token: bad, expires_in: 3600 }))
    const config = { tokenUrl: ep.url, secretRef: { name: 'c' } }
    const source = new TokenSource(spec(config), config, 'secretRef', fakeTimers())
    t.teardown(() => source.close())
    await t.rejects(source.refresh(), /access_token is not a valid field value/, what)
  }
  const ep = await tokenEndpoint(t, () => ({ access_token: 'a.b-c_d~e+f/g=', expires_in: 3600 }))
  const config = { tokenUrl: ep.url, secretRef: { name: 'c' } }
  const source = new TokenSource(spec(config), config, 'secretRef', fakeTimers())
  t.teardown(() => source.close())
  await source.refresh()
  t.equal(source.current(), 'Bearer a.b-c_d~e+f/g=', 'a token of visible characters is used')
})

// expires_in 0, negative or empty made every token expired on arrival: each
// request fetched a token of its own (and the refresh timer one a second while
// idle). A lifetime that is not a positive number is unknown: the default 300 s.
t.test('expires_in that is not a positive number is the default lifetime, not a fetch per request', async (t) => {
  for (const expiresIn of [0, -30, '', '0', null, 'soon']) {
    const ep = await tokenEndpoint(t, () => ({ access_token: 'tok', token_type: 'Bearer', expires_in: expiresIn }))
    const timers = fakeTimers()
    const config = { tokenUrl: ep.url, secretRef: { name: 'c' } }
    const source = new TokenSource(spec(config), config, 'secretRef', timers)
    t.teardown(() => source.close())
    await source.refresh()
    for (let i = 0; i < 5; i++) t.equal(await source.current(), 'Bearer tok', `expires_in ${JSON.stringify(expiresIn)}: cached`)
    t.equal(source.fetches, 1, `expires_in ${JSON.stringify(expiresIn)}: one fetch`)
    t.equal(timers.armed[0]?.ms, 240_000, 'refreshed 60 s before the default 300 s')
  }
})

// An upstream's 401 to a request carrying the cached token says the token is
// no good (revoked, rotated at the provider): the cache drops it, if it is
// still the one cached, so the next request fetches a new one instead of
// using a dead one until it expires. An upstream that answers 401 to
// everything makes at most one fetch per MIN_REFRESH_MS (1 s) of the last.
t.test('a 401 to the cached token drops it once; the next request fetches a new one; refetches are bounded', async (t) => {
  let n = 0
  const ep = await tokenEndpoint(t, () => ({ access_token: `tok-${++n}`, expires_in: 3600 }))
  const timers = fakeTimers()
  const config = { tokenUrl: ep.url, secretRef: { name: 'c' } }
  const hooks = oauth2(spec(config), timers)
  t.teardown(() => hooks.close?.())
  const client: ClientInfo = { address: '127.0.0.1', namespace: null, serviceAccount: null, pod: null, spiffeId: null }
  const view = (): RequestView => ({ method: 'GET', path: '/', authority: 'api.example.test', headers: {}, client, route: 'r', rule: 'r/0', backend: 'b', gateway: 'g', scheme: 'https' })
  const send = async (): Promise<RequestView> => { const v = view(); await hooks.requestHeaders?.(v); return v }
  const answer = (v: RequestView, status: number): unknown => hooks.responseHeaders?.(v, { status, headers: {} })

  const first = await send()
  t.equal(first.headers.authorization, 'Bearer tok-1')
  timers.advance(2000)
  answer(first, 200)
  answer(first, 403)
  t.equal((await send()).headers.authorization, 'Bearer tok-1', 'a 200 or a 403 keeps the token')
  answer(first, 401)
  const second = await send()
  t.equal(second.headers.authorization, 'Bearer tok-2', 'after a 401 the next request carries a new token')
  t.equal(ep.fetches(), 2)
  answer(first, 401)
  t.equal((await send()).headers.authorization, 'Bearer tok-2', 'a late 401 to the old token does not drop the new one')
  answer(second, 401)
  t.equal((await send()).headers.authorization, 'Bearer tok-2', 'a 401 within 1 s of the fetch is not another fetch')
  t.equal(ep.fetches(), 2)
  // An upstream that answers 401 to everything for 5 s: at most one fetch per second.
  for (let i = 0; i < 50; i++) {
    timers.advance(100)
    answer(await send(), 401)
  }
  await send()
  t.ok(ep.fetches() <= 2 + 5, `bounded refetches (${ep.fetches() - 2} in 5 s)`)
  t.ok(ep.fetches() > 2, 'but a refused token is replaced')
})
