# syntax=docker/dockerfile:1
# sallyport egress gateway image. The image runs the production build
# (`npm run build`: the same modules as plain JavaScript, so Node loads no
# TypeScript stripper — about 30 MB less resident memory) with production
# dependencies only.

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
# The `node` devDependency only pins Node for npm scripts on developer machines
# (its install script downloads a binary); the image already is Node 24.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY bin ./bin
COPY lib ./lib
COPY schemas ./schemas
COPY fixtures/quickstart ./fixtures/quickstart
COPY scripts/build.ts ./scripts/build.ts
RUN node scripts/build.ts /app/dist

FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

FROM node:24-bookworm-slim
# MALLOC_ARENA_MAX: two glibc malloc arenas instead of up to 8 per core (README "Memory").
ENV NODE_ENV=production MALLOC_ARENA_MAX=2
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
# dist/ holds bin/, lib/, schemas/, fixtures/quickstart and package.json.
COPY --from=build /app/dist ./
# Non-root (the `node` user of the base image, uid 1000); read-only root filesystem friendly:
# nothing is written outside /tmp.
USER 1000:1000
EXPOSE 8080 9901
# --max-semi-space-size: README "Memory" (it must be given when node starts).
ENTRYPOINT ["node", "--max-semi-space-size=8", "/app/bin/sallyport.js", "serve"]
CMD ["--config", "/etc/sallyport"]
