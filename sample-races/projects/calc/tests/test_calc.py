import unittest

import calc


class AddTest(unittest.TestCase):
    def test_adds_integers(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_adds_negative_numbers(self):
        self.assertEqual(calc.add(-4, 1), -3)

    def test_adds_floats(self):
        self.assertAlmostEqual(calc.add(0.1, 0.2), 0.3)


class SubtractTest(unittest.TestCase):
    def test_subtracts(self):
        self.assertEqual(calc.subtract(10, 4), 6)


class MultiplyTest(unittest.TestCase):
    def test_multiplies(self):
        self.assertEqual(calc.multiply(6, 7), 42)


class DivideTest(unittest.TestCase):
    def test_divides(self):
        self.assertEqual(calc.divide(9, 3), 3)

    def test_dividing_by_zero_raises(self):
        with self.assertRaises(ZeroDivisionError):
            calc.divide(1, 0)


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(calc.mean([1, 2, 3, 4]), 2.5)

    def test_mean_of_nothing_raises(self):
        with self.assertRaises(ValueError):
            calc.mean([])


if __name__ == "__main__":
    unittest.main()
