// The gateway alone in a forked bench child (bench/extensions.ts,
// bench/tracing.ts): the real pipeline (parse → snapshot → compile) and data
// plane, no CLI, logging silent. The parent measures this process's CPU.

/**
 * Serves `manifests` in this process, then tells the parent 'ready' and exits
 * when it disconnects. `setup` runs once logging is configured and before
 * the data path loads (a tracer, say).
 */
export async function serveInProcess(manifests: string, setup: () => Promise<void> = async () => {}): Promise<void> {
  const { configureLogger } = await import('../../lib/observe/log.ts')
  configureLogger({ level: 'silent' })
  await setup()
  const { parseManifests } = await import('../../lib/config/parse.ts')
  const { buildSnapshot } = await import('../../lib/config/snapshot-builder.ts')
  const { compile } = await import('../../lib/compile/compile.ts')
  const { ensureLookupIndexes } = await import('../../lib/compile/lookup-index.ts')
  const { createDataPlane } = await import('../../lib/listeners/data-plane.ts')
  const { createUpstreams } = await import('../../lib/upstream/registry.ts')
  const parsed = parseManifests('bench.yaml', manifests)
  const { table } = compile(buildSnapshot(parsed.docs, parsed.problems), { now: Date.now(), version: 1, gatewayClass: 'sallyport' })
  ensureLookupIndexes(table) // as the runtime does after a swap
  const upstreams = createUpstreams()
  upstreams.retain(table)
  const plane = createDataPlane({ bind: '127.0.0.1', upstreams, accessLog: false, gatewayId: 'bench' })
  await plane.apply(table)
  process.send?.('ready')
  process.on('disconnect', () => process.exit(0))
}
