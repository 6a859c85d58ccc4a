// A real redis-server for a test: on a free loopback port, nothing persisted,
// killed in teardown. Plain TCP, or TLS only (`--port 0 --tls-port`) with a
// certificate of the test PKI, and optionally client certificates required
// (`tls-auth-clients yes`, verified against `caPem`). Tests skip when
// redis-server is not installed.
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { unusedPort } from './ports.ts'

export const hasRedis = spawnSync('redis-server', ['--version']).status === 0

export interface RedisServer {
  readonly port: number
  /** What redis-server has written so far (its log; `--loglevel verbose` for accept errors). */
  output(): string
  /** Kills it now (SIGKILL); teardown does the same if it is still running. */
  kill(): Promise<void>
}

interface Teardown { teardown(fn: () => unknown): void }

export interface RedisServerOptions {
  /** More arguments (`--requirepass`, `--user`...). */
  readonly args?: readonly string[]
  /** TLS only: the server's certificate and key (PEM); `authClients`: require a client certificate issued by `caPem`. */
  readonly tls?: { readonly certPem: string; readonly keyPem: string; readonly caPem: string; readonly authClients?: boolean }
}

export async function startRedis(t: Teardown, options: RedisServerOptions = {}): Promise<RedisServer> {
  const port = await unusedPort()
  const args = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...(options.args ?? [])]
  if (options.tls === undefined) args.unshift('--port', String(port))
  else {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-redis-'))
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
    const file = (name: string, text: string): string => { const p = path.join(dir, name); fs.writeFileSync(p, text); return p }
    args.unshift('--port', '0', '--tls-port', String(port), '--tls-cert-file', file('cert.pem', options.tls.certPem),
      '--tls-key-file', file('key.pem', options.tls.keyPem), '--tls-ca-cert-file', file('ca.pem', options.tls.caPem), '--tls-auth-clients', options.tls.authClients === true ? 'yes' : 'no')
  }
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const kill = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  }
  t.teardown(kill)
  let out = ''
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start in 10 s:\n${out}`)), 10_000)
    const done = (err?: Error): void => { clearTimeout(timer); if (err === undefined) resolve(); else reject(err) }
    child.stdout.setEncoding('utf8').on('data', (s: string) => { out += s; if (out.includes('Ready to accept connections')) done() })
    child.stderr.setEncoding('utf8').on('data', (s: string) => { out += s })
    child.once('exit', () => done(new Error(`redis-server exited:\n${out}`)))
  })
  return { port, kill, output: () => out }
}
