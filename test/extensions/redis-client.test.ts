// The Redis client of the global rate limit against a real redis-server: AUTH
// with a password (requirepass) and as a Redis 6 ACL user; a refused AUTH
// fails the connection and every command behind it at once, with an error
// that names the refusal and never the password; a Redis that wants AUTH and
// gets none says so; rediss:// speaks TLS, verifies the certificate against
// the trust store and the name, and sends SNI for names only. The Debian
// redis-server is built with TLS, so TLS is tested against the real one too.
import t from 'tap'
import tls from 'node:tls'
import { RedisClient, RedisError, RedisErrorCode, RedisPool } from '../../lib/extensions/redis-client.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import { hasRedis, startRedis } from '../helpers/redis-server.ts'

const skip = hasRedis ? false : 'redis-server is not installed'
const PASSWORD = 'pw-Zq81-secret'

async function rejection(p: Promise<unknown>): Promise<RedisError> {
  try {
    await p
  } catch (err) {
    if (err instanceof RedisError) return err
    throw err
  }
  throw new Error('resolved; expected a rejection')
}

t.test('AUTH with the password of requirepass: commands run; without one they fail with NOAUTH, said plainly', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', PASSWORD] })
  const client = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { password: PASSWORD, timeoutMs: 2000 })
  t.teardown(() => client.close())
  t.equal(await client.command(['PING']), 'PONG')
  t.equal(await client.command(['SET', 'k', 'v']), 'OK')
  t.equal(await client.command(['GET', 'k']), 'v')

  const none = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { timeoutMs: 2000 })
  t.teardown(() => none.close())
  const err = await rejection(none.command(['PING']))
  t.equal(err.code, RedisErrorCode.NOAUTH)
  t.match(err.message, /^redis 127\.0\.0\.1:\d+ requires AUTH and no password is configured: NOAUTH Authentication required/)
})

t.test('AUTH as an ACL user: AUTH username password', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', 'default-pw'] })
  const admin = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { password: 'default-pw', timeoutMs: 2000 })
  t.teardown(() => admin.close())
  t.equal(await admin.command(['ACL', 'SETUSER', 'limiter', 'on', `>${PASSWORD}`, '~*', '+@all']), 'OK')
  const user = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { username: 'limiter', password: PASSWORD, timeoutMs: 2000 })
  t.teardown(() => user.close())
  t.equal(await user.command(['ACL', 'WHOAMI']), 'limiter', 'authenticated as the user, not default')
  const wrong = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { username: 'limiter', password: 'default-pw', timeoutMs: 2000 })
  t.teardown(() => wrong.close())
  const err = await rejection(wrong.command(['PING']))
  t.equal(err.code, RedisErrorCode.AUTH_REFUSED)
  t.match(err.message, /refused AUTH as user limiter: WRONGPASS/)
  t.notMatch(err.message, /default-pw/)
})

t.test('a refused AUTH fails the connection: every command behind it at once, with the refusal, never the password', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', 'the-right-one'] })
  const client = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { password: PASSWORD, timeoutMs: 5000 })
  t.teardown(() => client.close())
  const started = Date.now()
  // Pipelined behind AUTH on the first connection: each would get NOAUTH; all get the refusal.
  const errors = await Promise.all([rejection(client.command(['PING'])), rejection(client.command(['GET', 'k'])), rejection(client.command(['INCR', 'n']))])
  for (const err of errors) {
    t.equal(err.code, RedisErrorCode.AUTH_REFUSED)
    t.match(err.message, /^redis 127\.0\.0\.1:\d+ refused AUTH: WRONGPASS invalid username-password pair/)
    t.notMatch(err.message, PASSWORD, 'the password is not in the message')
  }
  // The next command within the second fails at once (no AUTH per request), naming the refusal still.
  const again = await rejection(client.command(['PING']))
  t.equal(again.code, RedisErrorCode.AUTH_REFUSED)
  t.match(again.message, /refused AUTH: WRONGPASS/)
  t.ok(Date.now() - started < 2000, 'nothing waited for the 5 s command timeout')
  t.notMatch(String(again.stack), PASSWORD)
})

t.test('a password for a Redis that has none: AUTH refused (ERR), the connection fails', { skip }, async (t) => {
  const redis = await startRedis(t)
  const client = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { password: PASSWORD, timeoutMs: 2000 })
  t.teardown(() => client.close())
  const err = await rejection(client.command(['PING']))
  t.equal(err.code, RedisErrorCode.AUTH_REFUSED)
  t.match(err.message, /refused AUTH: ERR AUTH <password> called without any password configured/)
  t.notMatch(err.message, PASSWORD)
})

t.test('the pool gives distinct credentials distinct connections', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', PASSWORD] })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const target = { host: '127.0.0.1', port: redis.port, tls: false }
  const good = pool.get(target, { password: PASSWORD, timeoutMs: 2000 })
  const bad = pool.get(target, { password: 'nope', timeoutMs: 2000 })
  t.not(good, bad)
  t.equal(pool.get(target, { password: PASSWORD, timeoutMs: 2000 }), good, 'the same credentials: the same client')
  t.not(pool.get(target, { username: 'u', password: PASSWORD, timeoutMs: 2000 }), good, 'a username too: another')
  t.not(pool.get({ ...target, tls: true }, { password: PASSWORD, timeoutMs: 2000 }), good, 'TLS: another')
  t.equal(await good.command(['PING']), 'PONG')
  t.equal((await rejection(bad.command(['PING']))).code, RedisErrorCode.AUTH_REFUSED)
})

// A rotated password (or a changed address) gives the extension a new client;
// the old one, still AUTHed with the old password, must not stay open.
t.test('the pool closes a client when the last user releases it', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', PASSWORD] })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const target = { host: '127.0.0.1', port: redis.port, tls: false }
  const a = pool.get(target, { password: PASSWORD, timeoutMs: 2000 })
  const b = pool.get(target, { password: PASSWORD, timeoutMs: 2000 })
  t.equal(a, b)
  t.equal(await a.command(['PING']), 'PONG')
  pool.release(a)
  t.equal(await b.command(['PING']), 'PONG', 'one user left: still open')
  pool.release(b)
  t.equal(pool.size, 0)
  t.equal((await rejection(b.command(['PING']))).code, RedisErrorCode.CLOSED, 'the last one closed it')
  const c = pool.get(target, { password: PASSWORD, timeoutMs: 2000 })
  t.not(c, a, 'a new user gets a new client')
  t.equal(await c.command(['PING']), 'PONG')
})

t.test('rediss://: TLS to a redis-server with a certificate of the test CA, verified; AUTH over it', { skip }, async (t) => {
  const ca = createCa()
  const leaf = serverCert(ca, ['localhost'])
  const redis = await startRedis(t, { args: ['--requirepass', PASSWORD], tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem } })
  const client = new RedisClient({ host: 'localhost', port: redis.port, tls: true }, { password: PASSWORD, timeoutMs: 3000, ca: ca.certPem })
  t.teardown(() => client.close())
  t.equal(client.address, `rediss://localhost:${redis.port}`)
  t.equal(await client.command(['PING']), 'PONG', 'by name')
  const byIp = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: true }, { password: PASSWORD, timeoutMs: 3000, ca: ca.certPem })
  t.teardown(() => byIp.close())
  t.equal(await byIp.command(['PING']), 'PONG', 'by address (an IP SAN)')

  // The system trust store does not hold the test CA.
  const untrusted = new RedisClient({ host: 'localhost', port: redis.port, tls: true }, { password: PASSWORD, timeoutMs: 3000 })
  t.teardown(() => untrusted.close())
  const err = await rejection(untrusted.command(['PING']))
  t.equal(err.code, RedisErrorCode.TLS)
  t.match(err.message, /^redis rediss:\/\/localhost:\d+: .*certificate/)

  // Plain RESP to a TLS port: no answer a client could take for one.
  const plain = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { timeoutMs: 500 })
  t.teardown(() => plain.close())
  t.ok((await rejection(plain.command(['PING']))) instanceof RedisError)
})

t.test('rediss://: a certificate for another name is refused', { skip }, async (t) => {
  const ca = createCa()
  const leaf = serverCert(ca, ['redis.example.test'], { ips: [] })
  const redis = await startRedis(t, { tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem } })
  const client = new RedisClient({ host: 'localhost', port: redis.port, tls: true }, { timeoutMs: 3000, ca: ca.certPem })
  t.teardown(() => client.close())
  const err = await rejection(client.command(['PING']))
  t.equal(err.code, RedisErrorCode.TLS)
  t.match(err.message, /localhost.*(altnames|does not match)|Hostname\/IP does not match/)
})

// SNI, seen from a node:tls server that answers RESP (+PONG) to whatever it gets.
t.test('rediss:// sends the host name as SNI, an address none', async (t) => {
  const ca = createCa()
  const leaf = serverCert(ca, ['localhost'])
  const seen: Array<string | false> = []
  const server = tls.createServer({ cert: leaf.certPem, key: leaf.keyPem, minVersion: 'TLSv1.2' }, (socket) => {
    seen.push((socket as tls.TLSSocket & { servername: string | false }).servername)
    socket.on('data', () => socket.write('+PONG\r\n'))
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const port = (server.address() as { port: number }).port
  for (const host of ['localhost', '127.0.0.1']) {
    const c = new RedisClient({ host, port, tls: true }, { timeoutMs: 3000, ca: ca.certPem })
    t.equal(await c.command(['PING']), 'PONG', host)
    c.close()
  }
  t.same(seen, ['localhost', false])
})
