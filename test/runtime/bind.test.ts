// Listening on `::` (the default of --bind and --admin): one dual-stack socket
// that IPv4 and IPv6 clients both reach; on a kernel without IPv6, 0.0.0.0.
import t from 'tap'
import { EventEmitter } from 'node:events'
import net, { type Server } from 'node:net'
import { ANY_ADDRESS, bindServer } from '../../lib/bind.ts'
import { logger } from '../../lib/observe/log.ts'

const log = logger('test')

async function ipv6Loopback(): Promise<boolean> {
  const probe = net.createServer()
  return new Promise((resolve) => {
    probe.once('error', () => resolve(false))
    probe.listen(0, '::1', () => probe.close(() => resolve(true)))
  })
}

function reach(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port }, () => { socket.setEncoding('utf8') })
    let got = ''
    socket.on('data', (s: string) => { got += s })
    socket.on('end', () => resolve(got))
    socket.on('error', reject)
  })
}

t.test(':: is reached over IPv4 and IPv6, and IPv4 peers read as mapped addresses', async (t) => {
  const seen: string[] = []
  const server = net.createServer((s) => { seen.push(s.remoteAddress ?? ''); s.end('hi') })
  t.teardown(() => { server.close() })
  await bindServer(server, ANY_ADDRESS, 0, log)
  const port = (server.address() as net.AddressInfo).port
  t.equal(await reach('127.0.0.1', port), 'hi', 'an IPv4 client')
  t.equal(seen[0], '::ffff:127.0.0.1')
  if (await ipv6Loopback()) t.equal(await reach('::1', port), 'hi', 'an IPv6 client')
  else t.comment('no IPv6 loopback on this host: the IPv6 client is not tried')
})

t.test('where the kernel has no IPv6, :: falls back to 0.0.0.0; other errors are the caller\'s', async (t) => {
  // A server whose IPv6 socket cannot be opened, as on a kernel booted with ipv6.disable=1.
  const fake = (code: string): { server: Server; hosts: string[] } => {
    const hosts: string[] = []
    const server = new EventEmitter() as unknown as Server
    ;(server as unknown as { listen: (o: { host: string }) => void }).listen = ({ host }) => {
      hosts.push(host)
      setImmediate(() => {
        if (host === '::') server.emit('error', Object.assign(new Error(`listen ${code} ${host}`), { code }))
        else server.emit('listening')
      })
    }
    return { server, hosts }
  }
  const noV6 = fake('EAFNOSUPPORT')
  await bindServer(noV6.server, ANY_ADDRESS, 8080, log)
  t.same(noV6.hosts, ['::', '0.0.0.0'], 'listening on 0.0.0.0 after ::')
  const taken = fake('EADDRINUSE')
  await t.rejects(bindServer(taken.server, ANY_ADDRESS, 8080, log), { code: 'EADDRINUSE' }, 'a taken port is reported, not retried on IPv4')
  t.same(taken.hosts, ['::'])
  const explicit = fake('EAFNOSUPPORT')
  await bindServer(explicit.server, '127.0.0.1', 8080, log)
  t.same(explicit.hosts, ['127.0.0.1'], 'an explicit address is used as given')
})
