#!/usr/bin/env -S node --max-semi-space-size=8
// The sallyport command line. Arguments are checked here, before any module
// that logs is loaded: the log level is read once, when lib/observe/log.ts loads.

import fs from 'node:fs'
import v8 from 'node:v8'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs, type ParseArgsConfig } from 'node:util'

const USAGE = `Usage: sallyport <command> [options]

Commands:
  serve        Serve the Gateway API manifests in --config and/or the API server (--kubernetes), reloading on change
  validate     Check manifests: one line per problem, exit 1 if any error
  routes       Print the route table the manifests compile to
  quickstart   Run a demo upstream and a gateway in front of it (what npm start runs)
  version      Print the version
  help         Print this text (also --help or -h after any command)

serve [options]
  --config PATH            Manifest file or directory, searched recursively for .yaml/.yml/.json, watched (repeatable; required without --kubernetes)
  --kubernetes             Watch Gateway API objects in the API server (in-cluster service account); write status, Events
  --kubeconfig FILE        Use this kubeconfig instead of the in-cluster service account (implies --kubernetes)
  --namespace NS           Watch namespaced kinds only in NS (repeatable; default: all namespaces)
  --label-selector SEL     Watch only objects matching this label selector (e.g. egress=sallyport)
  --gateway-class NAME     Serve the Gateways of this GatewayClass (default: sallyport)
  --publish-service NS/NAME  The Service in front of sallyport: its addresses are each served Gateway's status.addresses (default: none; any there are removed)
  --bind ADDR              Address the Gateway listeners bind, one of this host's (default: ::, every address of both families; 0.0.0.0 where the kernel has no IPv6)
  --admin ADDR:PORT|off    Admin server with /healthz /readyz /metrics /config_dump; :PORT is every address (default: :9901)
  --config-dump local|on|off  Who may read /config_dump: loopback clients (kubectl port-forward), any client, nobody (default: local)
  --workers N              Fork N worker processes sharing the listeners (with --kubernetes the primary watches the API server for all of them); 0 serves in one process (default: 0)
  --worker-watchdog-seconds N  With --workers: a worker whose event loop answers no ping for N s is killed and replaced; 0: never (default: 30)
  --access-log on|off      One JSON log line per request (default: on)
  --log-level LEVEL        trace, debug, info, warn, error, fatal or silent (default: info)
  --drain-seconds N        On SIGTERM/SIGINT, time in-flight requests get to finish (default: 15)
  --max-connections N      Open client connections per listening port (per process); past it new ones are closed at accept (default: 10000)
  --removed-series-seconds N  Metric series naming a Gateway, listener, route, backend, port or extension a reload removed leave /metrics N s later (default: 300)
  --dns-server ADDR[:PORT] DNS server for Backend hostnames (repeatable; default: the system's nameservers)
  --dns-min-ttl SECONDS    Shortest time a DNS answer is kept, whatever its TTL, at least 1 (default: 5)
  --dns-max-ttl SECONDS    Longest time a DNS answer is kept, whatever its TTL (default: 300)
  --dns-stale-ttl SECONDS  How long past expiry the last answer is served while it is refreshed or DNS fails; 0: never (default: 60)
  --allow-destination-cidr CIDR  Allow a guarded range (loopback, private, link-local...) for every Gateway (repeatable)
  --cluster-cidr CIDR      Pod/Service range of the cluster: refused for external Backends unless allowed (repeatable)
  --otlp-endpoint URL      Export a span per request and per upstream attempt over OTLP/HTTP to URL (e.g. http://127.0.0.1:4318/v1/traces); default: tracing off
  --otlp-protocol P        http/protobuf or http/json (default: http/protobuf)
  --trace-sampling RATIO   Share of new traces recorded, 0 to 1; requests with a parent follow its sampled flag (default: 1)
  --http1-client C         HTTP/1.1 client for upstream requests: sallyport (its own) or undici (default: sallyport)

validate PATH... [--gateway-class NAME]   Files or directories; prints FILE:DOC: KIND NS/NAME: FIELD: MESSAGE
routes PATH... [--gateway-class NAME] [--publish-service NS/NAME]
quickstart [--admin ADDR:PORT|off]   (default admin: 127.0.0.1:9901)

Exit codes: 0 ok, 1 configuration errors (validate) or failure, 2 usage error.
`

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']

class UsageError extends Error {}

/** `--help` (or `-h`) after a command: the usage, on stdout, exit 0. */
class HelpRequested extends Error {}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

function version(): string {
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string }
  return pkg.version
}

function parse(args: string[], options: ParseArgsConfig['options'], positionals: boolean): ReturnType<typeof parseArgs> {
  let parsed: ReturnType<typeof parseArgs>
  try {
    parsed = parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals: positionals, strict: true })
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err))
  }
  if (parsed.values.help === true) throw new HelpRequested()
  return parsed
}

function str(values: Record<string, unknown>, name: string, fallback: string): string {
  const v = values[name]
  return typeof v === 'string' ? v : fallback
}

function integer(values: Record<string, unknown>, name: string, fallback: number, min: number, max: number): number {
  const v = values[name]
  if (v === undefined) return fallback
  const n = Number(v)
  if (typeof v !== 'string' || !/^\d+$/.test(v) || n < min || n > max) throw new UsageError(`--${name} wants an integer from ${min} to ${max}, got ${JSON.stringify(v)}`)
  return n
}

/** Namespace and name: DNS-1123 labels (a Service name is also one). */
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/

/** `--publish-service NAMESPACE/NAME`, or null when not given. */
function publishService(values: Record<string, unknown>): string | null {
  const v = values['publish-service']
  if (v === undefined) return null
  const parts = typeof v === 'string' ? v.split('/') : []
  if (parts.length !== 2 || !parts.every((p) => DNS_LABEL.test(p))) throw new UsageError(`--publish-service wants NAMESPACE/NAME, the Service in front of sallyport (e.g. sallyport-system/sallyport), got ${JSON.stringify(v)}`)
  return v as string
}

function logLevel(values: Record<string, unknown>, fallback: string): void {
  const level = str(values, 'log-level', process.env.SALLYPORT_LOG_LEVEL ?? fallback)
  if (!LOG_LEVELS.includes(level)) throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')}`)
  process.env.SALLYPORT_LOG_LEVEL = level
}

async function admin(values: Record<string, unknown>, fallback: string): Promise<{ host: string; port: number } | null> {
  const { parseAdminAddress } = await import('../lib/observe/admin.ts')
  try {
    return parseAdminAddress(str(values, 'admin', fallback))
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err))
  }
}

/** Issue 10: tracing flags, plus the OpenTelemetry batch env vars (OTEL_BSP_*, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME). */
function tracingFlags(values: Record<string, unknown>): import('../lib/observe/tracing.ts').TracingOptions | null {
  const endpoint = values['otlp-endpoint']
  if (typeof endpoint !== 'string') {
    if (values['otlp-protocol'] !== undefined || values['trace-sampling'] !== undefined) throw new UsageError('--otlp-protocol and --trace-sampling need --otlp-endpoint')
    return null
  }
  let url: URL
  try { url = new URL(endpoint) } catch { throw new UsageError(`--otlp-endpoint ${JSON.stringify(endpoint)} is not a URL (e.g. http://127.0.0.1:4318/v1/traces)`) }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError('--otlp-endpoint must be an http:// or https:// URL')
  const protocol = str(values, 'otlp-protocol', 'http/protobuf')
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') throw new UsageError('--otlp-protocol must be http/protobuf or http/json')
  const ratioText = str(values, 'trace-sampling', '1')
  const sampling = Number(ratioText)
  if (!/^\d*\.?\d+$/.test(ratioText) || !(sampling >= 0 && sampling <= 1)) throw new UsageError(`--trace-sampling wants a ratio from 0 to 1, got ${JSON.stringify(ratioText)}`)
  const env = (name: string, min: number, max: number): number | undefined => {
    const v = process.env[name]
    if (v === undefined || v === '') return undefined
    const n = Number(v)
    if (!/^\d+$/.test(v) || n < min || n > max) throw new UsageError(`${name} wants an integer from ${min} to ${max}, got ${JSON.stringify(v)}`)
    return n
  }
  return {
    endpoint: url, protocol, sampling,
    // The Tracer holds a batch to the queue's size, either set or default.
    maxQueue: env('OTEL_BSP_MAX_QUEUE_SIZE', 1, 1_000_000), maxBatch: env('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 1, 1_000_000),
    delayMs: env('OTEL_BSP_SCHEDULE_DELAY', 0, 3_600_000),
    timeoutMs: env('OTEL_EXPORTER_OTLP_TIMEOUT', 1, 3_600_000),
    serviceName: process.env.OTEL_SERVICE_NAME || undefined,
    serviceVersion: version(),
  }
}

/** Issue 5: DNS servers, TTL clamps and the destination guard's CIDRs, checked before anything starts. */
async function destinationFlags(values: Record<string, unknown>): Promise<{
  dns: { servers: string[]; minTtlMs: number; maxTtlMs: number; staleMs: number }
  guard: { allowCidrs: string[]; clusterCidrs: string[] }
}> {
  const { parseDnsServer } = await import('../lib/upstream/dns.ts')
  const { parseCidr } = await import('../lib/address-ranges.ts')
  const list = (name: string): string[] => (values[name] ?? []) as string[]
  const servers = list('dns-server').map((s) => {
    try { return parseDnsServer(s) } catch (err) { throw new UsageError(`--dns-server: ${err instanceof Error ? err.message : String(err)}`) }
  })
  const cidrs = (name: string): string[] => list(name).map((c) => {
    const parsed = parseCidr(c)
    if (parsed === null) throw new UsageError(`--${name} ${JSON.stringify(c)} is not a CIDR (e.g. 10.0.0.0/8, fd00::/8)`)
    return parsed.text
  })
  // At least 1 s: with 0, a name whose answers carry TTL 0 was queried once per request.
  const minTtl = integer(values, 'dns-min-ttl', 5, 1, 86400)
  const maxTtl = integer(values, 'dns-max-ttl', 300, 0, 86400 * 7)
  if (maxTtl < minTtl) throw new UsageError('--dns-max-ttl must not be less than --dns-min-ttl')
  const stale = integer(values, 'dns-stale-ttl', 60, 0, 86400)
  return {
    dns: { servers, minTtlMs: minTtl * 1000, maxTtlMs: maxTtl * 1000, staleMs: stale * 1000 },
    guard: { allowCidrs: cidrs('allow-destination-cidr'), clusterCidrs: cidrs('cluster-cidr') },
  }
}

/**
 * `--bind ADDR` must be an address of this host: a listener's bind error is
 * retried (a port another process holds may free up), so a mistyped or foreign
 * address would leave every listener unbound and /readyz 503 for good. A socket
 * bound to port 0 there, and closed, tells. `::` (the default) is left to
 * lib/bind.ts, which falls back to 0.0.0.0 on a kernel without IPv6.
 */
async function checkBindAddress(bind: string): Promise<void> {
  if (bind === '::') return
  const net = await import('node:net')
  const server = net.createServer()
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen({ host: bind, port: 0, exclusive: true }, resolve)
    })
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err instanceof Error ? err.message : String(err))
    throw new UsageError(`--bind ${bind}: not an address of this host (${code})`)
  } finally {
    server.close()
  }
}

const out = {
  stdout: (line: string): void => { process.stdout.write(`${line}\n`) },
  stderr: (line: string): void => { process.stderr.write(`${line}\n`) },
}

async function main(argv: string[]): Promise<number | null> {
  const [command, ...rest] = argv
  switch (command) {
    case 'serve': {
      // A proxy's garbage is per request: V8's allocation-site pretenuring
      // learns (from the first bursts) to allocate request objects straight in
      // old space, which then fills with dead requests between mark-compacts
      // (bench/run.ts: peak RSS ~350 MB, p99 pauses of 20 ms at half load).
      // Off, they die young. The young generation's size is the other half
      // (--max-semi-space-size=8 in the shebang, the Dockerfile and the npm
      // scripts; it cannot be changed once the heap exists). README: "Memory".
      v8.setFlagsFromString('--no-allocation-site-pretenuring')
      const { values, positionals } = parse(rest, {
        config: { type: 'string', multiple: true },
        'gateway-class': { type: 'string' },
        'publish-service': { type: 'string' },
        bind: { type: 'string' },
        admin: { type: 'string' },
        workers: { type: 'string' },
        'access-log': { type: 'string' },
        'log-level': { type: 'string' },
        'drain-seconds': { type: 'string' },
        'removed-series-seconds': { type: 'string' },
        'max-connections': { type: 'string' },
        'config-dump': { type: 'string' },
        'worker-watchdog-seconds': { type: 'string' },
        kubernetes: { type: 'boolean' },
        kubeconfig: { type: 'string' },
        namespace: { type: 'string', multiple: true },
        'label-selector': { type: 'string' },
        'dns-server': { type: 'string', multiple: true },
        'dns-min-ttl': { type: 'string' },
        'dns-max-ttl': { type: 'string' },
        'dns-stale-ttl': { type: 'string' },
        'allow-destination-cidr': { type: 'string', multiple: true },
        'cluster-cidr': { type: 'string', multiple: true },
        'otlp-endpoint': { type: 'string' },
        'otlp-protocol': { type: 'string' },
        'trace-sampling': { type: 'string' },
        'http1-client': { type: 'string' },
      }, true)
      if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])} (use --config PATH)`)
      const configPaths = (values.config ?? []) as string[]
      const kubeconfig = typeof values.kubeconfig === 'string' ? values.kubeconfig : null
      const kubernetes = values.kubernetes === true || kubeconfig !== null
      if (kubeconfig !== null && !fs.existsSync(kubeconfig)) throw new UsageError(`--kubeconfig ${kubeconfig}: no such file`)
      if (!kubernetes && (values.namespace !== undefined || values['label-selector'] !== undefined)) throw new UsageError('--namespace and --label-selector need --kubernetes')
      if (configPaths.length === 0 && !kubernetes) throw new UsageError('serve needs at least one --config PATH (or --kubernetes)')
      for (const p of configPaths) if (!fs.existsSync(p)) throw new UsageError(`--config ${p}: no such file or directory`)
      const accessLog = str(values, 'access-log', 'on')
      if (accessLog !== 'on' && accessLog !== 'off') throw new UsageError('--access-log must be on or off')
      const http1Client = str(values, 'http1-client', 'sallyport')
      if (http1Client !== 'sallyport' && http1Client !== 'undici') throw new UsageError('--http1-client must be sallyport or undici')
      const workers = integer(values, 'workers', 0, 0, 256)
      const workerWatchdogSeconds = integer(values, 'worker-watchdog-seconds', 30, 0, 3600)
      const drainSeconds = integer(values, 'drain-seconds', 15, 0, 3600)
      const removedSeriesSeconds = integer(values, 'removed-series-seconds', 300, 0, 86400)
      const maxConnections = integer(values, 'max-connections', 10_000, 1, 1_000_000)
      const configDump = str(values, 'config-dump', 'local')
      if (configDump !== 'local' && configDump !== 'on' && configDump !== 'off') throw new UsageError('--config-dump must be local, on or off')
      const destination = await destinationFlags(values)
      const tracing = tracingFlags(values)
      const publish = publishService(values)
      logLevel(values, 'info')
      const adminAddress = await admin(values, ':9901')
      const bind = str(values, 'bind', '::')
      await checkBindAddress(bind)
      const { serve } = await import('../lib/runtime/serve.ts')
      await serve({
        configPaths, gatewayClass: str(values, 'gateway-class', 'sallyport'), bind,
        kubernetes: kubernetes ? { kubeconfig, namespaces: (values.namespace ?? []) as string[], labelSelector: typeof values['label-selector'] === 'string' ? values['label-selector'] : null } : null,
        admin: adminAddress, configDump, workers, workerWatchdogSeconds, accessLog: accessLog === 'on', drainSeconds, removedSeriesSeconds, maxConnections, ...destination, tracing, http1Client,
        publishService: publish,
      })
      return null // keeps running until a signal
    }
    case 'validate': {
      const { values, positionals } = parse(rest, { 'gateway-class': { type: 'string' }, 'log-level': { type: 'string' } }, true)
      if (positionals.length === 0) throw new UsageError('validate needs at least one PATH')
      for (const p of positionals) if (!fs.existsSync(p)) throw new UsageError(`${p}: no such file or directory`)
      logLevel(values, 'silent')
      const { validateCommand } = await import('../lib/runtime/offline.ts')
      return validateCommand(positionals, out, str(values, 'gateway-class', 'sallyport'))
    }
    case 'routes': {
      const { values, positionals } = parse(rest, { 'gateway-class': { type: 'string' }, 'publish-service': { type: 'string' }, 'log-level': { type: 'string' } }, true)
      if (positionals.length === 0) throw new UsageError('routes needs at least one PATH')
      for (const p of positionals) if (!fs.existsSync(p)) throw new UsageError(`${p}: no such file or directory`)
      const publish = publishService(values)
      logLevel(values, 'silent')
      const { routesCommand } = await import('../lib/runtime/offline.ts')
      return routesCommand(positionals, str(values, 'gateway-class', 'sallyport'), out, publish)
    }
    case 'quickstart': {
      const { values } = parse(rest, { admin: { type: 'string' }, 'log-level': { type: 'string' } }, false)
      logLevel(values, 'info')
      const adminAddress = await admin(values, '127.0.0.1:9901')
      const { quickstart } = await import('../lib/runtime/quickstart.ts')
      await quickstart({ admin: adminAddress, print: out.stdout })
      return null
    }
    case 'version':
    case '--version':
      parse(rest, {}, false)
      out.stdout(`sallyport ${version()} (node ${process.version})`)
      return 0
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(USAGE)
      return 0
    case undefined:
      throw new UsageError('missing command')
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`)
  }
}

main(process.argv.slice(2)).then((code) => {
  if (code !== null) process.exitCode = code
}, (err: unknown) => {
  if (err instanceof HelpRequested) {
    process.stdout.write(USAGE)
    process.exitCode = 0
    return
  }
  if (err instanceof UsageError) {
    process.stderr.write(`sallyport: ${err.message}\n\n${USAGE}`)
    process.exitCode = 2
    return
  }
  // A failure sallyport names (a stable SP_ERR_ code: an address it cannot listen on) is one line; anything else, a stack.
  const code = err instanceof Error ? (err as { code?: unknown }).code : undefined
  const named = typeof code === 'string' && code.startsWith('SP_ERR_')
  process.stderr.write(`sallyport: ${err instanceof Error ? (named ? err.message : (err.stack ?? err.message)) : String(err)}\n`)
  // A failed start may leave servers open (admin, listeners): do not linger half-started.
  process.exit(1)
})
