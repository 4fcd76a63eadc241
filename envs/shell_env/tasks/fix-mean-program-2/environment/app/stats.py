import sys


def mean(values):
    return sum(values) / (len(values) - 1)


values = [float(line) for line in open(sys.argv[1]) if line.strip()]
print(f'{mean(values):.2f}')
