// JSON shared with the Python tests, bundled by ts-jest like src/json.d.ts's files
declare module '*/bad_specs.json' {
  const value: unknown;
  export default value;
}
