// `npm start` = `sallyport quickstart`: a demo upstream on 127.0.0.1:9080, the
// gateway serving fixtures/quickstart with its listener on 127.0.0.1:8080, and
// the curl command that goes through it. Works offline; loopback only.

import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { logger } from '../observe/log.ts'
import { startDemoUpstream } from './demo-upstream.ts'
import { serve } from './serve.ts'

const log = logger('quickstart')

export const QUICKSTART_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'quickstart')
const UPSTREAM_PORT = 9080
const LISTENER_PORT = 8080
const HOSTNAME = 'api.example.test'

export async function quickstart(options: { admin: { host: string; port: number } | null; print: (line: string) => void }): Promise<void> {
  try {
    await startDemoUpstream({ host: '127.0.0.1', port: UPSTREAM_PORT })
  } catch (err) {
    log.error({ err, port: UPSTREAM_PORT }, 'cannot start the demo upstream (is the port in use?)')
    process.exit(1)
  }
  await serve({
    configPaths: [QUICKSTART_DIR], gatewayClass: 'sallyport', bind: '127.0.0.1', admin: options.admin,
    workers: 0, accessLog: true, drainSeconds: 1,
  })
  const admin = options.admin === null ? '' : `http://${options.admin.host === '0.0.0.0' || options.admin.host === '::' ? '127.0.0.1' : options.admin.host.includes(':') ? `[${options.admin.host}]` : options.admin.host}:${options.admin.port}`
  const lines = [
    '',
    'sallyport quickstart is running.',
    `  demo upstream : http://127.0.0.1:${UPSTREAM_PORT} (echoes what it receives)`,
    `  gateway       : http://127.0.0.1:${LISTENER_PORT} (configuration: ${path.relative(process.cwd(), QUICKSTART_DIR) || '.'})`,
    ...(admin === '' ? [] : [`  admin         : ${admin}/config_dump  ${admin}/metrics  ${admin}/readyz`]),
    '',
    'Send a request through the gateway:',
    `  curl -H 'Host: ${HOSTNAME}' http://127.0.0.1:${LISTENER_PORT}/get`,
    '',
    'Edit the files under fixtures/quickstart and the gateway reloads them. Ctrl-C stops.',
    '',
  ]
  for (const line of lines) options.print(line)
}
