import { Box, Text } from 'ink';

/** The verdict's other recommendations, after the first one the banner shows. */
export function Advice({ items }: { items: string[] }) {
  return (
    <Box flexDirection="column" flexShrink={0} marginTop={1}>
      <Text bold>What else to do</Text>
      {items.map((text, i) => (
        <Text key={text} wrap="truncate-end">
          {`  ${i + 2}. ${text}`}
        </Text>
      ))}
    </Box>
  );
}
