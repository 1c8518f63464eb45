/** stepscope's version, in a file of its own so that `--version` and `--help` load nothing else. */
export const VERSION = '0.1.0';
