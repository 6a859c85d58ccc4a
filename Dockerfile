# syntax=docker/dockerfile:1
# sallyport egress gateway image. Node 24 runs the TypeScript sources directly
# (type stripping), so the image carries no build output, only production deps.

FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# The `node` devDependency pins Node for npm scripts on developer machines; the
# image already is Node 24, so production dependencies only.
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY lib ./lib
COPY schemas ./schemas
COPY fixtures/quickstart ./fixtures/quickstart
# Non-root (the `node` user of the base image, uid 1000); read-only root filesystem friendly:
# nothing is written outside /tmp.
USER 1000:1000
EXPOSE 8080 9901
ENTRYPOINT ["node", "--max-semi-space-size=8", "/app/bin/sallyport.ts", "serve"]
CMD ["--config", "/etc/sallyport"]
