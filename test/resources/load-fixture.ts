// Test helper: the documents of a fixtures/resources/*.yaml file, as plain objects.
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import path from 'node:path'
import { parseAllDocuments } from 'yaml'

const dir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../fixtures/resources')

export function loadFixture(name: string): Array<Record<string, unknown>> {
  const text = readFileSync(path.join(dir, name), 'utf8')
  return parseAllDocuments(text).map((d) => d.toJS() as Record<string, unknown>)
}

export function fixtureSource(name: string, doc: number): { file: string; doc: number } {
  return { file: `fixtures/resources/${name}`, doc }
}
