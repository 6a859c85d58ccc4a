// Binding a listener's server: resolve once it listens, reject with the listen
// error (EADDRINUSE, EACCES…) so the data plane can report the port as failed;
// after that, server errors are logged, never thrown.

import type { Server } from 'node:net'
import type { Logger } from '../observe/log.ts'

export function bindServer(server: Server, bind: string, port: number, log: Logger): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => { server.off('listening', onListening); reject(err) }
    const onListening = (): void => {
      server.off('error', onError)
      server.on('error', (err: Error) => log.error({ err: err.message }, 'listener error'))
      resolve()
    }
    server.once('error', onError)
    server.once('listening', onListening)
    server.listen({ host: bind, port, exclusive: false })
  })
}
