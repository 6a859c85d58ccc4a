// Reads the process's own Prometheus registry (lib/observe/metrics.ts) in
// tests that run the data plane, the status writer or the leader elector in
// the test process itself.
import { registry } from '../../lib/observe/metrics.ts'

/** Sum of a metric's samples whose labels include `labels` (all samples when none are given); 0 when it is not registered. */
export async function metricValue(name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = registry.getSingleMetric(name)
  if (m === undefined) return 0
  const data = await m.get()
  let sum = 0
  for (const v of data.values) {
    // A histogram's samples carry their own names (_bucket, _sum, _count): only the metric's own count.
    if ((v as { metricName?: string }).metricName !== undefined && (v as { metricName?: string }).metricName !== name) continue
    const l = v.labels as Record<string, unknown>
    if (Object.entries(labels).every(([k, x]) => String(l[k]) === x)) sum += v.value
  }
  return sum
}
