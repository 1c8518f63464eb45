"""The delivery window on its own: what is sent, resent, released and dropped (no socket, no clock)."""

import unittest

from stepscope._window import Window


def filled(limit, seqs):
    window = Window(limit)
    for seq in seqs:
        window.add(seq, b"row%d" % seq)
    return window


def send_all(window, max_rows):
    """Every frame the sender would send now, as lists of seqs; and how many rows were resent."""
    frames, resent = [], 0
    while window.unsent:
        frame = window.next_frame(max_rows)
        resent += window.sent(frame)
        frames.append([seq for seq, _ in frame])
    return frames, resent


class WindowTest(unittest.TestCase):
    def test_each_row_goes_out_once_per_connection_in_order(self):
        window = filled(100, range(1, 8))
        self.assertEqual(send_all(window, 3), ([[1, 2, 3], [4, 5, 6], [7]], 0))
        window.add(8, b"row8")
        self.assertEqual(send_all(window, 3), ([[8]], 0))
        self.assertEqual(send_all(window, 3), ([], 0))

    def test_a_frame_whose_send_failed_stays_unsent(self):
        window = filled(100, range(1, 5))
        window.next_frame(2)  # built, never sent: the connection broke first
        self.assertEqual(window.unsent, 4)
        self.assertEqual(send_all(window, 2), ([[1, 2], [3, 4]], 0))

    def test_a_new_connection_resends_all_above_the_ack_once(self):
        window = filled(100, range(1, 7))
        send_all(window, 10)
        self.assertEqual(window.ack(2), 2)
        window.rewind()
        window.add(7, b"row7")  # new since the last connection: sent, not resent
        self.assertEqual(send_all(window, 10), ([[3, 4, 5, 6, 7]], 4))

    def test_an_ack_releases_rows_and_never_leaves_more_unsent_than_held(self):
        window = filled(100, range(1, 6))
        send_all(window, 2)
        window.add(6, b"row6")
        self.assertEqual(window.ack(4), 4)
        self.assertEqual((len(window), window.unsent), (2, 1))
        self.assertEqual(window.ack(10), 2)
        self.assertEqual((len(window), window.unsent), (0, 0))
        self.assertEqual(window.ack(3), 0)

    def test_past_its_limit_the_oldest_rows_go_first_then_the_waiting(self):
        window = filled(4, range(1, 6))
        self.assertEqual(window.shed(0), (1, 0))
        self.assertEqual(send_all(window, 10), ([[2, 3, 4, 5]], 0))
        self.assertEqual(window.shed(2), (2, 0))
        self.assertEqual((len(window), window.unsent), (2, 0))
        self.assertEqual(window.shed(7), (2, 3))
        self.assertEqual((len(window), window.unsent), (0, 0))
        self.assertEqual(filled(4, range(1, 4)).shed(1), (0, 0))

    def test_clear_lets_go_of_everything(self):
        window = filled(10, range(1, 4))
        window.clear()
        self.assertEqual((len(window), window.unsent, window.next_frame(5)), (0, 0, []))


if __name__ == "__main__":
    unittest.main()
