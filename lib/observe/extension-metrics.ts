// Metrics of the extension pipeline (issue 7). Labels from the fixed set plus
// the extension's name/type; never a credential, never a header value.

import { Counter } from 'prom-client'
import { registry } from './metrics.ts'

export const extensionFailures = new Counter({
  name: 'sallyport_extension_failures_total',
  help: 'Extension hooks that failed; outcome "open" continued the request (failOpen, or a stream reader that could not read an answer it never holds back), "closed" answered 500.',
  labelNames: ['extension', 'type', 'outcome'] as const, registers: [registry],
})

export const extensionDenials = new Counter({
  name: 'sallyport_extension_denials_total',
  help: 'Requests an extension answered itself (authorization 403, rate limit 429, guardrail 403, ...).',
  labelNames: ['extension', 'type', 'status'] as const, registers: [registry],
})

export const rateLimitBackendErrors = new Counter({
  name: 'sallyport_rate_limit_redis_errors_total',
  help: 'Global rate-limit decisions Redis could not answer; outcome "open" let the request through, "closed" answered 429.',
  labelNames: ['outcome'] as const, registers: [registry],
})

export const aiTokens = new Counter({
  name: 'sallyport_ai_tokens_total',
  help: 'AI model tokens read from OpenAI-compatible responses (usage.prompt_tokens = input, completion_tokens = output).',
  labelNames: ['model', 'namespace', 'service_account', 'direction'] as const, registers: [registry],
})

export const eventsEmitted = new Counter({
  name: 'sallyport_events_total',
  help: 'Events emitted for denials and transform failures (after aggregation).',
  labelNames: ['reason'] as const, registers: [registry],
})
