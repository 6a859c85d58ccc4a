// Finds manifest-looking YAML in markdown, for spec-examples.test.ts.

/** YAML candidates in a markdown file: fenced yaml blocks, then unfenced runs starting at `apiVersion:`. */
export function extractYamlBlocks(markdown: string): string[] {
  const blocks: string[] = []
  const lines = markdown.split('\n')
  let fence: string[] | null = null
  let fenceLang = ''
  const outside: string[] = []
  for (const line of lines) {
    const m = /^\s*```\s*([A-Za-z]*)/.exec(line)
    if (m !== null) {
      if (fence === null) { fence = []; fenceLang = (m[1] ?? '').toLowerCase(); outside.push('') }
      else { if (fenceLang === 'yaml' || fenceLang === 'yml' || fenceLang === '') blocks.push(fence.join('\n')); fence = null }
      continue
    }
    if (fence !== null) fence.push(line)
    else outside.push(line)
  }
  // Unfenced YAML: from a column-0 `apiVersion:` (with the comment lines just
  // above it) while lines look like YAML: blank, `---`, comments, indented
  // lines, or lower-case top-level keys. Prose such as "Note: ..." ends the run.
  const yamlish = (l: string): boolean => l.trim() === '' || l === '---' || /^\s*#/.test(l) || /^\s/.test(l) || /^[a-z][A-Za-z0-9_.-]*:(\s|$)/.test(l) || /^- /.test(l)
  for (let i = 0; i < outside.length; i++) {
    if (!/^apiVersion:/.test(outside[i] ?? '')) continue
    let start = i
    while (start > 0 && /^\s*#/.test(outside[start - 1] ?? '')) start--
    let end = i
    while (end + 1 < outside.length && yamlish(outside[end + 1] ?? '')) end++
    blocks.push(outside.slice(start, end + 1).join('\n'))
    i = end
  }
  return blocks
}

