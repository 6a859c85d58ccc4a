// HTTP/1.1 `Upgrade: h2c` (RFC 7540 §3.2, h2c-upgrade.ts): the gateway switches
// only on a request with one well-formed HTTP2-Settings field; anything else is
// served as HTTP/1.1, as a server that does not upgrade would.

import t from 'tap'
import net from 'node:net'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

function statusLine(port: number, head: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(head))
    let out = ''
    const done = (): void => { socket.destroy(); resolve(out.split('\r\n')[0] ?? '') }
    const timer = setTimeout(done, 2000)
    socket.on('data', (c: Buffer) => { out += c.toString('latin1'); if (out.includes('\r\n')) { clearTimeout(timer); done() } })
    socket.on('error', () => {})
  })
}

t.test('Upgrade: h2c with an HTTP2-Settings field that is not one base64url SETTINGS payload is not upgraded', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const head = (settings: string): string =>
    `GET / HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n${settings}\r\n`
  t.equal(await statusLine(port, head('HTTP2-Settings: AAMAAABkAAQAAP__\r\n')), 'HTTP/1.1 101 Switching Protocols', 'a valid one: 101')
  t.equal(await statusLine(port, head('HTTP2-Settings: \r\n')), 'HTTP/1.1 101 Switching Protocols', 'an empty one (no settings): 101')
  for (const [what, field] of [
    ['not base64url', 'HTTP2-Settings: !!!not base64$$$\r\n'],
    ['base64, not base64url', 'HTTP2-Settings: AAMAAABkAAQAAP+/\r\n'],
    ['not a whole setting (6 bytes each)', 'HTTP2-Settings: AAMAAABkAA\r\n'],
    ['two fields', 'HTTP2-Settings: AAMAAABkAAQAAP__\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n'],
  ] as const) {
    t.equal(await statusLine(port, head(field)), 'HTTP/1.1 200 OK', `${what}: served as HTTP/1.1`)
  }
})

t.test('after the 101, a first frame that is no SETTINGS within the frame size is refused at once, never buffered whole', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  // What a frame header may claim: a 16 MiB SETTINGS (the length field's most) the splice waited for
  // whole, copying what it had at each read; a HEADERS frame in place of SETTINGS.
  for (const [what, header] of [
    ['a SETTINGS frame of 16 MiB', Buffer.from([0xff, 0xff, 0xff, 4, 0, 0, 0, 0, 0])],
    ['a HEADERS frame first', Buffer.from([0x00, 0x40, 0x00, 1, 4, 0, 0, 0, 1])],
  ] as const) {
    const outcome = await new Promise<string>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write(
        'GET / HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: \r\n\r\n'))
      let switched = false
      let received = Buffer.alloc(0)
      const timer = setTimeout(() => { socket.destroy(); resolve('still open after 2 s') }, 2000)
      socket.on('data', (c: Buffer) => {
        received = Buffer.concat([received, c])
        if (!switched && received.includes('\r\n\r\n')) {
          switched = true
          socket.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'), header, Buffer.alloc(32 * 1024)]))
        }
      })
      socket.on('error', () => {})
      socket.on('close', () => {
        clearTimeout(timer)
        // The session's GOAWAY: type 7 somewhere after the 101's head.
        const at = received.indexOf('\r\n\r\n') + 4
        let goaway = false
        for (let i = at; i + 9 <= received.length; i += 9 + received.readUIntBE(i, 3)) if (received[i + 3] === 7) goaway = true
        resolve(goaway ? 'GOAWAY, closed' : 'closed')
      })
    })
    t.equal(outcome, 'GOAWAY, closed', `${what}: a connection error at once`)
  }
})
