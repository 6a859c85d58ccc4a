// Plugin: the user's own JS/TS module (config.path), whose default export is
// a PluginFactory (plugin-api.ts). Loaded once per path and modification time
// with a dynamic import (Node strips TypeScript types itself), so an edited
// plugin file is picked up by the next reload and an unchanged one is never
// re-imported. compile stays pure: loading happens here, in the runtime, before
// the table that needs it is swapped in.

import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import type { CompiledExtension } from '../compile/table.ts'
import { logger } from '../observe/log.ts'
import type { ExtensionHooks, PluginFactory } from './plugin-api.ts'

const log = logger('plugin')
const modules = new Map<string, Promise<PluginFactory>>()

/** The factory of the module at `file` (imported once per path + mtime). */
export function loadPlugin(file: string): Promise<PluginFactory> {
  const abs = path.resolve(file)
  let mtime: number
  try { mtime = fs.statSync(abs).mtimeMs } catch (err) { return Promise.reject(new Error(`plugin ${abs} cannot be read: ${(err as Error).message}`)) }
  const key = `${abs}#${mtime}`
  let p = modules.get(key)
  if (p === undefined) {
    p = import(`${pathToFileURL(abs).href}?mtime=${mtime}`).then((mod: Record<string, unknown>) => {
      const factory = mod.default ?? mod.create
      if (typeof factory !== 'function') throw new Error(`plugin ${abs} has no default export function`)
      return factory as PluginFactory
    })
    modules.set(key, p)
  }
  return p
}

const HOOKS = ['requestHeaders', 'requestBody', 'readsRequestBody', 'responseHeaders', 'responseBody', 'readsResponseBody', 'responseStream', 'close'] as const

/**
 * Hooks that wait for the module until it is loaded, then are replaced by the
 * module's own (so chains built after loading see exactly the hooks it has).
 */
export function plugin(spec: CompiledExtension): { hooks: ExtensionHooks; ready: Promise<void> } {
  const file = spec.config.path
  if (typeof file !== 'string') throw new Error('path is required')
  const options = (spec.config.options ?? {}) as Readonly<Record<string, unknown>>
  const hooks: ExtensionHooks = {}
  const ready = loadPlugin(file).then(async (factory) => {
    const made = await factory(options, {
      name: spec.name, source: spec.source, secrets: spec.secrets.secretRef ?? {},
      log: { info: (f, m) => log.info({ plugin: spec.name, ...f }, m), warn: (f, m) => log.warn({ plugin: spec.name, ...f }, m) },
    })
    for (const h of HOOKS) delete (hooks as Record<string, unknown>)[h]
    for (const h of HOOKS) if (typeof made[h] === 'function') (hooks as Record<string, unknown>)[h] = (made[h] as (...a: unknown[]) => unknown).bind(made)
  })
  // Until loaded: every hook waits for the module, then runs its own (or nothing).
  const waiting = (name: typeof HOOKS[number]) => async (...args: unknown[]): Promise<never | undefined> => {
    await ready
    const real = (hooks as Record<string, unknown>)[name]
    return typeof real === 'function' ? (real as (...a: unknown[]) => never)(...args) : undefined
  }
  hooks.requestHeaders = waiting('requestHeaders')
  hooks.requestBody = waiting('requestBody')
  hooks.responseHeaders = waiting('responseHeaders')
  hooks.responseBody = waiting('responseBody')
  return { hooks, ready }
}
