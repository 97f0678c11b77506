from fedcore.cli import main

main()
