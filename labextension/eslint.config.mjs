// ESLint as in the JupyterLab extension template: recommended JavaScript and TypeScript
// rules, @jupyter/eslint-plugin's recommended JupyterLab rules, Prettier for layout, and the
// JupyterLab naming conventions.
import js from '@eslint/js';
import jupyter from '@jupyter/eslint-plugin';
import prettierRecommended from 'eslint-plugin-prettier/recommended';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules',
      'lib',
      'coverage',
      '.yarn',
      '**/*.js',
      '**/*.d.ts'
    ]
  },
  js.configs.recommended,
  tseslint.configs.recommended,
  { plugins: { jupyter } },
  ...jupyter.configs.recommended,
  {
    rules: {
      // The extension is English only and ships no translation catalog; its diagnostics
      // repeat the kernel's English messages word for word.
      'jupyter/no-untranslated-string': 'off',
      // Activation needs these modules at once: the ranks service registers the comm target
      // on every kernel, the ranks panel goes into the sidebar, the editor extension is
      // registered before the first notebook opens.
      'jupyter/prefer-lazy-imports': [
        'warn',
        { ignoreImports: ['./editor', './ranks', './ranksPanel'] }
      ]
    }
  },
  {
    // the build scripts run in Node
    files: ['scripts/**/*.mjs'],
    languageOptions: { globals: globals.node }
  },
  {
    files: ['**/*.ts', '**/*.tsx'],
    languageOptions: {
      globals: { ...globals.browser, ...globals.es2015 },
      sourceType: 'module'
    },
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: { regex: '^I[A-Z]', match: true }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['warn', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-use-before-define': 'off',
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error'
    }
  },
  prettierRecommended
);
