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
        self.assertEqual(window.shed(0), (1, 0))  # not sent yet: dropped
        self.assertEqual(send_all(window, 10), ([[2, 3, 4, 5]], 0))
        self.assertEqual(window.shed(2), (0, 0))  # sent: in doubt, not dropped
        self.assertEqual((len(window), window.unsent), (2, 0))
        self.assertEqual(window.shed(7), (0, 3))
        self.assertEqual((len(window), window.unsent), (0, 0))
        self.assertEqual(filled(4, range(1, 4)).shed(1), (0, 0))

    def test_sent_rows_let_go_of_count_as_delivered_once_acknowledged(self):
        window = filled(3, [1, 2, 3, 5, 6])  # 4 fell off the training thread's queue
        send_all(window, 10)
        window.add(7, b"row7")
        window.add(8, b"row8")
        self.assertEqual(window.shed(0), (0, 0))  # 1, 2, 3, 5 were sent: in doubt
        self.assertEqual(window.ack(2), 2)
        self.assertEqual(window.ack(5), 2)  # 3 and 5 (4 was never there)
        self.assertEqual(window.ack(7), 2)  # 6 and 7, held
        self.assertEqual((len(window), window.unsent), (1, 1))

    def test_rows_in_doubt_that_a_new_connection_does_not_hold_are_lost(self):
        window = filled(2, range(1, 5))
        send_all(window, 10)
        window.add(5, b"row5")
        self.assertEqual(window.shed(0), (0, 0))  # 1, 2, 3 in doubt
        self.assertEqual(window.ack(1), 1)  # the new connection's welcome: it holds 1
        self.assertEqual(window.rewind(), 2)  # 2 and 3: not held there, not here
        self.assertEqual(window.ack(3), 0)
        self.assertEqual(send_all(window, 10), ([[4, 5]], 1))

    def test_clear_lets_go_of_everything(self):
        window = filled(2, range(1, 4))
        send_all(window, 10)
        window.shed(0)
        window.clear()
        self.assertEqual(window.ack(3), 0)
        self.assertEqual((len(window), window.unsent, window.next_frame(5)), (0, 0, []))


if __name__ == "__main__":
    unittest.main()
