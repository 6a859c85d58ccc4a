// A corporate HTTP CONNECT proxy for tests: records every CONNECT target and
// its Proxy-Authorization, answers 407 unless the credential matches (when one
// is required), and tunnels to 127.0.0.1 on the requested port whatever the
// requested host (it plays the proxy's own DNS).

import type { Test } from 'tap'
import net from 'node:net'

export interface CorpProxy {
  readonly port: number
  /** `host:port` of each CONNECT, in arrival order. */
  readonly tunnels: string[]
  readonly auths: Array<string | undefined>
}

/** `credential`: `user:password` the proxy requires; undefined: none required. */
export async function startCorpProxy(t: Test, credential?: string): Promise<CorpProxy> {
  const tunnels: string[] = []
  const auths: Array<string | undefined> = []
  const expected = credential === undefined ? undefined : 'Basic ' + Buffer.from(credential).toString('base64')
  const proxy = net.createServer((sock) => {
    sock.on('error', () => {})
    sock.once('data', (chunk) => {
      const headText = chunk.toString('latin1')
      const [line = ''] = headText.split('\r\n')
      const target = line.split(' ')[1] ?? ''
      const auth = /proxy-authorization: (.*)\r\n/i.exec(headText)?.[1]
      tunnels.push(target)
      auths.push(auth)
      if (expected !== undefined && auth !== expected) {
        sock.end('HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n')
        return
      }
      const port = Number(target.slice(target.lastIndexOf(':') + 1))
      const up = net.connect(port, '127.0.0.1', () => {
        sock.write('HTTP/1.1 200 Connection Established\r\n\r\n')
        sock.pipe(up).pipe(sock)
      })
      up.on('error', () => sock.destroy())
      sock.on('close', () => up.destroy())
    })
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => proxy.close())
  return { port: (proxy.address() as net.AddressInfo).port, tunnels, auths }
}
