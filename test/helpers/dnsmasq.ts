// A real DNS server for tests: dnsmasq on 127.0.0.1, a free high port, no
// upstream servers, no /etc/hosts — it answers only what the test writes.
// Records live in an addn-hosts file (A, AAAA and the matching PTR records)
// plus extra options (--ptr-record, --address=/name/ip...); `update()` rewrites
// the file and SIGHUPs dnsmasq, which re-reads it. Names under .test and
// .example it does not know get NXDOMAIN (--local); names under a
// `servfailZones` zone not in the hosts file are forwarded to a UDP responder
// that answers SERVFAIL, which dnsmasq relays — a real SERVFAIL on the wire.
//
// When dnsmasq is not installed, `dnsmasqSkip()` gives the reason to t.skip.

import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Resolver } from 'node:dns/promises'
import dgram from 'node:dgram'
import type { Test } from 'tap'
import { freePort } from '../e2e/harness.ts'

const CANDIDATES = ['/usr/sbin/dnsmasq', '/usr/bin/dnsmasq', '/sbin/dnsmasq']

export function dnsmasqPath(): string | null {
  for (const p of CANDIDATES) if (fs.existsSync(p)) return p
  return null
}

/** null when dnsmasq can run here; else why the test is skipped. */
export function dnsmasqSkip(): string | null {
  return dnsmasqPath() === null ? 'dnsmasq is not installed (scripts/system-deps.sh installs dnsmasq-base)' : null
}

export interface DnsmasqOptions {
  /** `address name...` lines of the hosts file. */
  readonly hosts?: readonly string[]
  /** Extra command-line options (--ptr-record=..., --server=...). */
  readonly args?: readonly string[]
  /** TTL of the answers (--local-ttl); default 1 s. */
  readonly ttl?: number
  /** Zones whose names, when not in the hosts file, get SERVFAIL. */
  readonly servfailZones?: readonly string[]
}

export interface Dnsmasq {
  readonly port: number
  /** `127.0.0.1:PORT`, for --dns-server. */
  readonly server: string
  /** Rewrite the hosts file and make dnsmasq re-read it (SIGHUP); resolves once it answers with the change. */
  update(hosts: readonly string[], probe?: { name: string; expect: string | null }): Promise<void>
  stop(): Promise<void>
  start(): Promise<void>
}

export async function startDnsmasq(t: Test, options: DnsmasqOptions = {}): Promise<Dnsmasq> {
  const bin = dnsmasqPath()
  if (bin === null) throw new Error('dnsmasq missing: check dnsmasqSkip() first')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-dns-'))
  const hostsFile = path.join(dir, 'hosts')
  fs.writeFileSync(hostsFile, (options.hosts ?? []).join('\n') + '\n')
  // dnsmasq started as root drops to `nobody`; it must still read the file on SIGHUP.
  fs.chmodSync(dir, 0o755)
  fs.chmodSync(hostsFile, 0o644)
  const port = await freePort()
  const zones = options.servfailZones ?? []
  let servfail: dgram.Socket | null = null
  const zoneArgs: string[] = []
  if (zones.length > 0) {
    const sock = dgram.createSocket('udp4')
    // Echo the query back as a response with RCODE 2 (SERVFAIL), recursion available.
    sock.on('message', (m, from) => {
      if (m.length < 12) return
      const out = Buffer.from(m)
      out[2] = 0x80 | (m[2] & 0x79)
      out[3] = 0x82
      sock.send(out, from.port, from.address)
    })
    await new Promise<void>((resolve) => sock.bind(0, '127.0.0.1', resolve))
    servfail = sock
    for (const z of zones) zoneArgs.push(`--server=/${z}/127.0.0.1#${sock.address().port}`)
  }
  let child: ChildProcess | null = null
  let log = ''
  const args = [
    '--no-daemon', `--port=${port}`, '--listen-address=127.0.0.1', '--bind-interfaces', '--no-resolv', '--no-hosts',
    `--addn-hosts=${hostsFile}`, `--local-ttl=${options.ttl ?? 1}`, '--no-negcache', '--cache-size=0',
    '--pid-file=', '--log-facility=-', '--local=/test/', '--local=/example/', ...zoneArgs, ...(options.args ?? []),
  ]
  const resolver = new Resolver({ timeout: 500, tries: 1 })
  resolver.setServers([`127.0.0.1:${port}`])

  const start = async (): Promise<void> => {
    const c = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    child = c
    c.stdout?.setEncoding('utf8').on('data', (s: string) => { log += s })
    c.stderr?.setEncoding('utf8').on('data', (s: string) => { log += s })
    // Ready when it answers (NXDOMAIN for a name nobody has is an answer).
    const deadline = Date.now() + 10_000
    for (let i = 0; i < 200; i++) {
      if (c.exitCode !== null) throw new Error(`dnsmasq exited (${c.exitCode}): ${log}`)
      try {
        await resolver.resolve4('ready.test')
        return
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        if (code === 'ENOTFOUND' || code === 'ENODATA' || code === 'EREFUSED') return
      }
      if (Date.now() > deadline) break
      await new Promise((r) => setTimeout(r, 50))
    }
    throw new Error(`dnsmasq did not answer on port ${port}: ${log}`)
  }
  const stop = async (): Promise<void> => {
    const c = child
    child = null
    if (c === null || c.exitCode !== null || c.signalCode !== null) return
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()))
    c.kill('SIGTERM')
    const timer = setTimeout(() => c.kill('SIGKILL'), 3000)
    await exited
    clearTimeout(timer)
  }
  t.teardown(async () => {
    await stop()
    servfail?.close()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  await start()

  return {
    port,
    server: `127.0.0.1:${port}`,
    start,
    stop,
    async update(hosts, probe) {
      fs.writeFileSync(hostsFile, hosts.join('\n') + '\n')
      child?.kill('SIGHUP')
      if (probe === undefined) { await new Promise((r) => setTimeout(r, 200)); return }
      const deadline = Date.now() + 5000
      for (let i = 0; i < 100 && Date.now() < deadline; i++) {
        const got = await resolver.resolve4(probe.name).then((a) => a, () => [] as string[])
        if (probe.expect === null ? got.length === 0 : got.includes(probe.expect)) return
        await new Promise((r) => setTimeout(r, 50))
      }
      throw new Error(`dnsmasq did not pick up the change for ${probe.name}: ${log}`)
    },
  }
}
