// JSON read at build time from outside src/ (the spec schema and contracts.json from the
// Python package, the cell templates); the builder bundles them. A declaration instead of
// `resolveJsonModule`, which would pull the files into tsc's rootDir.
declare module '*.schema.json' {
  const value: Record<string, unknown>;
  export default value;
}

declare module '*/components.json' {
  const value: unknown;
  export default value;
}

declare module '*/contracts.json' {
  const value: unknown;
  export default value;
}
