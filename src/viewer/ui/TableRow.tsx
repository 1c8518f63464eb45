import { Text } from 'ink';
import type { ReactNode } from 'react';

/** One table row: the cells of the columns shown, in order, a space apart. */
export function TableRow<Key extends string>({ keys, content }: { keys: Key[]; content: Record<Key, ReactNode> }) {
  return (
    <>
      {keys.map((key, i) => (
        <Text key={key}>
          {i > 0 ? ' ' : ''}
          {content[key]}
        </Text>
      ))}
    </>
  );
}
