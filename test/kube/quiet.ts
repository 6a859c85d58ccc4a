// Imported first by the kube tests: loggers are created when their modules load,
// so the level must be set before lib/observe/log.ts is evaluated.
process.env.SALLYPORT_LOG_LEVEL ??= 'silent'
